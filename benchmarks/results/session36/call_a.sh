#!/usr/bin/env bash
# Thirty-sixth session, call A (from branch balanced-sums, 038c88a):
#   1. GPT-2 and BERT `coda+graph`, main against balanced-sums (each variant's src/ and
#      benchmarks/ from `git archive BRANCH src benchmarks/*.py` under variants/BRANCH, carried)
#   2. the a_col_sums probe on balanced-sums (session35/a_col_sums_probe.py)
#   3. the whole GPU suite on balanced-sums (main + the balanced sums): not run since the
#      thirty-fifth session merged a_col_sums into main
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw --format=csv
VARIANTS="main balanced-sums" bash benchmarks/results/session35/ab.sh
PYTHONPATH=$PWD/src timeout 60 python benchmarks/results/session35/a_col_sums_probe.py > "$out/probe.txt" 2>&1
echo "probe rc=$?"; cat "$out/probe.txt"
PYTHONPATH=$PWD/src timeout 300 python -m pytest -q -n 8 -p no:cacheprovider --tb=short tests/gpu \
  tests/integrations/test_compile_gpu.py > "$out/gpu_tests.txt" 2>&1
echo "tests rc=$?"; grep -E "passed|failed|FAILED|Error" "$out/gpu_tests.txt" | tail -15
