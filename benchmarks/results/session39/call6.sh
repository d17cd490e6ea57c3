#!/usr/bin/env bash
# Thirty-ninth session, call 6: GPT-2's layer GEMMs with Conv1D-laid-out weights, cuBLAS against
# CODA, alone and sustained (layout_probe.py).
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
timeout 300 python benchmarks/results/session39/layout_probe.py > "$out/layout_probe.log" 2>&1
echo "rc=$?"; cat "$out/layout_probe.log" | tail -40
