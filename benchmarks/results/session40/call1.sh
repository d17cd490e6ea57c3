#!/usr/bin/env bash
# Fortieth session, call 1: cuDNN attention's time by the layout of q, k, v and dO at GPT-2's
# shape (sdpa_layout.py), and the layouts torch.compile's GPT-2 step passes it (compile_sdpa_layout.py).
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv > "$out/gpu.txt"
timeout 200 python benchmarks/results/session40/sdpa_layout.py > "$out/sdpa_layout.log" 2>&1
echo "sdpa rc=$?"; cat "$out/sdpa_layout.log"
timeout 250 python benchmarks/results/session40/compile_sdpa_layout.py > "$out/compile_sdpa_layout.log" 2>&1
echo "compile rc=$?"; tail -60 "$out/compile_sdpa_layout.log"
