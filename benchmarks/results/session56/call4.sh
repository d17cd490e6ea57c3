#!/bin/bash
# Session 56, call 4: share_tiles again, its operands fetched by a warp of their own:
# GPU tests of every test program through it and of the packed staging, then the probe.
export PYTHONPATH=$PWD/src CODA_AUTOTUNE=0
OUT=${OUT:-benchmarks/results/session56/call4}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > "$OUT/gpu.txt"
N=""; python -c "import xdist" 2>/dev/null && N="-n 4"
timeout 200 python -m pytest -q -x $N tests/gpu/test_triton_gpu.py -k "pingpong_shared or packed_output" \
    > "$OUT/gpu_tests_full.txt" 2>&1; rc=$?
tail -25 "$OUT/gpu_tests_full.txt" > "$OUT/gpu_tests.txt"; rm "$OUT/gpu_tests_full.txt"
tail -3 "$OUT/gpu_tests.txt"; [ $rc = 0 ] || { echo "GPU tests rc=$rc: no probe"; exit 1; }
timeout 240 python benchmarks/results/session56/pack_staging_probe.py --json "$OUT/pack_staging.json" 2>&1 | tail -12
