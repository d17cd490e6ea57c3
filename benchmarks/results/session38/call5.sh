#!/usr/bin/env bash
# Thirty-eighth session, call 5: launch_cached keeping its constexprs (review commit): the
# repeated and misaligned one-pass LayerNorm backward against torch, and the norms' GPU tests.
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
timeout 60 python benchmarks/results/session37/launch_check.py 2>&1 | tee "$out/launch_check.txt" | tail -5
timeout 120 python -m pytest -q -n 8 -p no:cacheprovider --tb=short tests/gpu/test_ops_norms.py > "$out/gpu_tests.txt" 2>&1
echo "tests rc=$?"; grep -E "passed|failed|FAILED|Error" "$out/gpu_tests.txt" | tail -4
