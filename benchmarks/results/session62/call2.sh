#!/usr/bin/env bash
# Sixty-second session, call 2: paired_probe.py (pair_rows against the ping-pong kernel).
#   run(command="bash benchmarks/results/session62/call2.sh", timeout_s=598)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee "$out/gpu.txt"
timeout 570 python benchmarks/results/session62/paired_probe.py --json "$out/paired_probe.json" 2>&1 \
    | tee "$out/paired_probe.log" | grep -v "^round"
echo "rc=${PIPESTATUS[0]} at ${SECONDS}s"
