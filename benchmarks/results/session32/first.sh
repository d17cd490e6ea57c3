#!/usr/bin/env bash
# Thirty-second session, first call: GPT-2's CUDA-graph step with CODA on three trees (main:
# the tied embedding's gradient merged, general head path; variants/notied: main before that
# merge; variants/exp: main with the head's exponential path the default), 30 steps each,
# then the whole GPU suite on main.
#   bash benchmarks/results/session32/first.sh   (on a GPU, from the repository root; carry
#   benchmarks/results/session32/variants)
export CODA_AUTOTUNE=0 PYTHONUNBUFFERED=1
V=$PWD/benchmarks/results/session32/variants
out=${OUT:-/tmp}
for v in main notied exp; do
  tree=$PWD/src; [ $v = main ] || tree=$V/$v
  PYTHONPATH=$tree timeout 100 python benchmarks/train.py --models gpt2 --modes coda+graph --steps 30 \
    --warmup 2 --curve none --profile none --timeout 95 --json "$out/gpt2_$v.json" > "$out/gpt2_$v.log" 2>&1
  echo "gpt2 $v rc=$? $(grep -o '"tokens_per_s": [0-9.]*' "$out/gpt2_$v.json" | head -1)"
done
PYTHONPATH=$PWD/src timeout 300 python -m pytest -q -n 8 -p no:cacheprovider --tb=short tests/gpu \
  > "$out/gpu_tests.txt" 2>&1
echo "gpu tests rc=$?"; grep -E "passed|failed|FAILED|Error" "$out/gpu_tests.txt" | tail -12
