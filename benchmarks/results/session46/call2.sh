#!/usr/bin/env bash
# Forty-sixth session, call 2: the GPU tests that had never run on a GPU (HF models added in the
# 45th session, autocast, unfinished row sums) on main, verbose so that a failure is named even if
# the timeout cuts the run; the patched trees' norm / model GPU tests; then GPT-2 trained by main
# and the three trees (session44/trees.sh, LN_CONFIG from call 1's probe) beside compile+graph.
#   run(command="LN_CONFIG=1,1,8,3 bash benchmarks/results/session46/call2.sh", timeout_s=600)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
bash benchmarks/results/session44/trees.sh || exit 1
timeout 100 python -m pytest -v -n 12 -p no:cacheprovider tests/gpu/test_hf_gpu.py \
    "tests/gpu/test_triton_gpu.py::test_unfinished_row_sums_read_as_row_partials" > "$out/gpu_tests_new.log" 2>&1
echo "gpu tests (new, main) rc=$?"; grep -E "FAILED|ERROR|passed|failed" "$out/gpu_tests_new.log" | cut -c1-250 | head -20
(cd /tmp/partials && PYTHONPATH=/tmp/partials/src timeout 100 python -m pytest -v -n 12 -p no:cacheprovider \
    tests/gpu/test_ops_norms.py tests/gpu/test_nn_gpt.py tests/gpu/test_hf_gpu.py \
    -k "not (mistral or qwen or phi3 or autocast)") > "$out/gpu_tests_partials.log" 2>&1
echo "gpu tests (partials tree) rc=$?"; grep -E "FAILED|ERROR|passed|failed" "$out/gpu_tests_partials.log" | cut -c1-250 | head
timeout 290 python benchmarks/train.py --models gpt2 --modes compile+graph,coda+graph \
    --tree rows=/tmp/rows/src --tree partials=/tmp/partials/src --tree partials_only=/tmp/partials_only/src \
    --steps 30 --rounds 10 --warmup 3 --curve none --profile coda+graph --timeout 280 \
    --json "$out/train_gpt2.json" > "$out/train_gpt2.log" 2>&1
echo "gpt2 rc=$?"; grep -E "tokens/s|round by round|rror" "$out/train_gpt2.log" | head -14
