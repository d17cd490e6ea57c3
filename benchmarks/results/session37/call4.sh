#!/usr/bin/env bash
# Thirty-seventh session, call 4: the prefetching variant of the one-pass LayerNorm backward, then
# the whole GPU suite on main with the one-pass backward merged.
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
(cd benchmarks/results/session37 && timeout 90 python ln_prefetch_probe.py) > "$out/prefetch_probe.txt" 2>&1
echo "prefetch rc=$?"; cat "$out/prefetch_probe.txt" | tail -15
timeout 400 python -m pytest -q -n 12 -p no:cacheprovider --tb=short tests/gpu tests/integrations/test_compile_gpu.py \
  > "$out/gpu_suite.txt" 2>&1
echo "suite rc=$?"; grep -E "passed|failed|FAILED|Error" "$out/gpu_suite.txt" | tail -12
