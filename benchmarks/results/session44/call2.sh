#!/usr/bin/env bash
# Call 2 for the session after the forty-fourth: the GPU tests of the norms and of the GPT-2 / HF
# models on /tmp/partials (both patches) and of the norms on /tmp/partials_only, then GPT-2
# trained by main and by the three patched trees (trees.sh) beside compile+graph, interleaved
# rounds, one profiled step each. Call 3 (call3.sh): BERT the same way.
#   run(command="LN_CONFIG=4,4,2,3 bash benchmarks/results/session44/call2.sh", timeout_s=600)
# (LN_CONFIG: call 1's "best:" line.)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
bash benchmarks/results/session44/trees.sh || exit 1
(cd /tmp/partials && PYTHONPATH=/tmp/partials/src timeout 110 python -m pytest -q -n 12 -p no:cacheprovider -rf \
    tests/gpu/test_ops_norms.py tests/gpu/test_nn_gpt.py tests/gpu/test_hf_gpu.py tests/gpu/test_concat_gpu.py \
    -k "not (mistral or qwen or phi3 or autocast)") \
    > "$out/gpu_tests_partials.log" 2>&1
echo "gpu tests (partials tree) rc=$?"; grep -E "^FAILED|passed|failed" "$out/gpu_tests_partials.log" | cut -c1-250 | head
(cd /tmp/partials_only && PYTHONPATH=/tmp/partials_only/src timeout 60 python -m pytest -q -n 12 -p no:cacheprovider \
    -rf tests/gpu/test_ops_norms.py) > "$out/gpu_tests_partials_only.log" 2>&1
echo "gpu tests (partials_only tree) rc=$?"; grep -E "^FAILED|passed|failed" "$out/gpu_tests_partials_only.log" | head
timeout 290 python benchmarks/train.py --models gpt2 --modes compile+graph,coda+graph \
    --tree rows=/tmp/rows/src --tree partials=/tmp/partials/src --tree partials_only=/tmp/partials_only/src \
    --steps 30 --rounds 12 --warmup 3 --curve none --profile coda+graph --timeout 280 \
    --json "$out/train_gpt2.json" > "$out/train_gpt2.log" 2>&1
echo "gpt2 rc=$?"; grep -E "tokens/s|round by round|rror" "$out/train_gpt2.log" | head -14
