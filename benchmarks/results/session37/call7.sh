#!/usr/bin/env bash
# Thirty-seventh session, call 7: the one-pass backward through its cached direct launcher:
# repeated and misaligned launches against torch, the GPU tests of the norms and models, then
# GPT-2 and BERT `coda` (no graph) before (variants/main) and after (variants/ln2).
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
out=${OUT:-/tmp}
PYTHONPATH=$PWD/src timeout 60 python benchmarks/results/session37/launch_check.py 2>&1 | tee "$out/launch_check.txt" | tail -5
PYTHONPATH=$PWD/src timeout 110 python -m pytest -q -n 12 -p no:cacheprovider --tb=short tests/gpu/test_ops_norms.py \
  tests/gpu/test_nn_gpt.py tests/gpu/test_hf_gpu.py > "$out/gpu_tests.txt" 2>&1
echo "tests rc=$?"; grep -E "passed|failed|FAILED|Error" "$out/gpu_tests.txt" | tail -6
for v in main ln2; do
  PYTHONPATH=$PWD/variants/$v/src timeout 100 python variants/$v/benchmarks/train.py --models gpt2,bert \
    --modes coda --steps 20 --warmup 3 --curve none --profile none --timeout 55 \
    --json "$out/$v.json" > "$out/$v.log" 2>&1
  echo "$v rc=$?"; grep -E "tokens/s|rror" "$out/$v.log" | head -3
done
