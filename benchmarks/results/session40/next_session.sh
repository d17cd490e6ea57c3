#!/usr/bin/env bash
# Left by the fortieth session for the next one's first device call: the whole GPU suite on the
# one-pass LayerNorm changes (layer_norm_linear's backward, the forward without given sums), which
# ran only the GPU tests of the norms, Concat GEMMs, HF models and CODA's GPT (41 and 14 tests);
# then GPT-2 and BERT against compile+graph in interleaved rounds.
#   run(command="bash benchmarks/results/session40/next_session.sh", timeout_s=600)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
timeout 300 python -m pytest -q -n 12 -p no:cacheprovider tests/gpu tests/integrations/test_compile_gpu.py \
    > "$out/gpu_suite.log" 2>&1
echo "suite rc=$?"; tail -3 "$out/gpu_suite.log"
timeout 270 python benchmarks/train.py --models gpt2,bert --modes compile+graph,coda+graph --steps 30 --rounds 10 \
  --warmup 3 --curve none --profile none --timeout 240 --json "$out/train.json" > "$out/train.log" 2>&1
echo "train rc=$?"; grep -E "tokens/s|round by round|rror" "$out/train.log" | head -8
