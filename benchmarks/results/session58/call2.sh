#!/usr/bin/env bash
# Fifty-eighth session, call 2 (and 3, with the `cpasync_ef` and `spread` edits): tile operands fetched with cp.async instead of TMA
# (cpasync_probe.py), (c) and (e) at K = 768 (4- and 5-deep rings) and K = 2048.
#   run(command="bash benchmarks/results/session58/call2.sh", timeout_s=400)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee "$out/gpu.txt"
PYTHONPATH=$PWD/src timeout 380 python benchmarks/results/session58/cpasync_probe.py --sets k768,k2048 \
    --rounds 3 --json "$out/cpasync.json" > "$out/cpasync.log" 2>&1
echo "cpasync rc=$? at ${SECONDS}s"; grep -E '^\{|equal|rror' "$out/cpasync.log" | tail -12
