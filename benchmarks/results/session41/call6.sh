#!/usr/bin/env bash
# Forty-first session, call 6: the whole GPU suite on the session's last main (A's column sums
# read with the lanes down the rows; call 5 ran the 54 tests of the ops that sum them and of the
# HF models).
#   run(command="bash benchmarks/results/session41/call6.sh", timeout_s=420)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
timeout 380 python -m pytest -q -n 12 -p no:cacheprovider tests/gpu tests/integrations/test_compile_gpu.py \
    > "$out/gpu_suite.log" 2>&1
echo "suite rc=$?"; tail -3 "$out/gpu_suite.log"
