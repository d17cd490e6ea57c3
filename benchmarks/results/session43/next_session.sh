#!/usr/bin/env bash
# Left by the forty-third session for the next one: the whole GPU suite on main (the last full
# run, call 2, was before the noted sums took the norm's parameter dtype and stopped inside
# custom ops; call 4 ran the HF, norm, linear and GPT-2 files), then GPT-2 against
# compile+graph in 15 interleaved rounds (calls 2 and 4 read 1.190x and 1.191x over 10).
#   run(command="bash benchmarks/results/session43/next_session.sh", timeout_s=600)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
timeout 290 python -m pytest -q -n 12 -p no:cacheprovider -rf tests/gpu tests/integrations/test_compile_gpu.py \
    > "$out/gpu_tests.log" 2>&1
echo "gpu tests rc=$?"; grep -E "^FAILED|passed|failed" "$out/gpu_tests.log" | cut -c1-250 | head -20
timeout 290 python benchmarks/train.py --models gpt2 --modes compile+graph,coda+graph --steps 30 --rounds 15 \
  --warmup 3 --curve none --profile none --timeout 280 --json "$out/train.json" > "$out/train.log" 2>&1
echo "train rc=$?"; grep -E "tokens/s|round by round|rror" "$out/train.log" | head -8
