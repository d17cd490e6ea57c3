#!/usr/bin/env bash
# Thirty-eighth session, call 1: programmatic dependent launch (PDL). The launch-path GPU tests
# (with the dependent chain), then GPT-2 and BERT `coda+graph` with CODA_PDL=0 and =1 (profiled),
# then the whole GPU suite in what time is left.
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
out=${OUT:-/tmp}
PYTHONPATH=$PWD/src timeout 90 python -m pytest -q -p no:cacheprovider --tb=short tests/gpu/test_launch_gpu.py \
  > "$out/launch_tests.txt" 2>&1
echo "launch tests rc=$?"; grep -E "passed|failed|FAILED|Error" "$out/launch_tests.txt" | tail -6
for pdl in 0 1; do
  CODA_PDL=$pdl PYTHONPATH=$PWD/src timeout 150 python benchmarks/train.py --models gpt2,bert \
    --modes coda+graph --steps 30 --warmup 2 --curve none --profile coda+graph --timeout 140 \
    --json "$out/pdl$pdl.json" > "$out/pdl$pdl.log" 2>&1
  echo "pdl=$pdl rc=$?"; grep -E "tokens/s|rror" "$out/pdl$pdl.log" | head -4
done
PYTHONPATH=$PWD/src timeout 200 python -m pytest -q -n 12 -p no:cacheprovider --tb=short tests/gpu \
  tests/integrations/test_compile_gpu.py > "$out/gpu_suite.txt" 2>&1
echo "suite rc=$?"; grep -E "passed|failed|FAILED|Error" "$out/gpu_suite.txt" | tail -8
