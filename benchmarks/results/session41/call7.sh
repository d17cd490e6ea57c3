#!/usr/bin/env bash
# Forty-first session, call 7: the whole GPU suite on the session's last main (the ones-column
# form of call 6 reverted; A's column sums read with the lanes down the rows).
#   run(command="bash benchmarks/results/session41/call7.sh", timeout_s=280)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
timeout 255 python -m pytest -q -n 14 -p no:cacheprovider tests/gpu tests/integrations/test_compile_gpu.py \
    > "$out/gpu_suite.log" 2>&1
echo "suite rc=$?"; tail -3 "$out/gpu_suite.log"
