#!/usr/bin/env bash
# Forty-first session, call 3: where the GEMMs that sum A's columns lose time (sums_probe.py).
#   run(command="bash benchmarks/results/session41/call3.sh", timeout_s=420)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
timeout 360 python benchmarks/results/session41/sums_probe.py > "$out/sums_probe.log" 2>&1
echo "probe rc=$?"; cat "$out/sums_probe.log" | cut -c1-200
