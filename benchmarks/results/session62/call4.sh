#!/usr/bin/env bash
# Sixty-second session, call 4: the GPU tests of pair_rows' edges (refused with share_tiles, a
# Concat joined), then config_sweep.py (every Hopper candidate at LLaMA-492M's shapes, the JSON
# written after each shape) in the time left.
#   run(command="bash benchmarks/results/session62/call4.sh", timeout_s=400)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee "$out/gpu.txt"
timeout 100 python -m pytest -q tests/gpu/test_triton_gpu.py -k "paired_rows" -p no:cacheprovider 2>&1 | tail -4
timeout $((${LIMIT:-380} - SECONDS)) python benchmarks/results/session62/config_sweep.py \
    --json "$out/config_sweep.json" 2>&1 | tee "$out/config_sweep.log" | grep -v "^round"
echo "rc=${PIPESTATUS[0]} at ${SECONDS}s"
