#!/usr/bin/env bash
# Seventy-second session, call 2: call2.py, then the two cross-entropy tests that ran out of
# memory beside seven other workers in call 1, alone.
#   run(command="cd .snap && bash benchmarks/results/session72/call2.sh", carry=[".snap"], timeout_s=300)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
timeout 150 python benchmarks/results/session72/call2.py 2>&1 | tee "$out/call2.log" | tail -40
timeout $((280 - SECONDS)) python -m pytest -q -p no:cacheprovider --tb=short tests/gpu/test_ops_cross_entropy.py \
    -k "test_skip_ignored_bf16" > "$out/ce_tests.log" 2>&1
echo "ce tests rc=$? at ${SECONDS}s"; tail -3 "$out/ce_tests.log"
