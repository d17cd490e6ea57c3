#!/usr/bin/env bash
# Thirty-seventh session, call 5: the GPU tests of the norms on three pipeline stages, then GPT-2
# and BERT, `compile+graph` (the fastest peer) beside `coda+graph`, 30 steps each.
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
timeout 120 python -m pytest -q -n 8 -p no:cacheprovider --tb=short tests/gpu/test_ops_norms.py > "$out/gpu_tests.txt" 2>&1
echo "tests rc=$?"; grep -E "passed|failed|FAILED|Error" "$out/gpu_tests.txt" | tail -4
for model in gpt2 bert; do
  timeout 190 python benchmarks/train.py --models $model --modes compile+graph,coda+graph --steps 30 --warmup 3 \
    --curve none --profile none --timeout 180 --json "$out/$model.json" > "$out/$model.log" 2>&1
  echo "$model rc=$?"; grep -E "tokens/s|rror" "$out/$model.log" | head -4
done
