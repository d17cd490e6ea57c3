#!/bin/bash
# Session 56, call 1: the packed output staged in the ping-pong kernel: GPU tests, then the probe.
export PYTHONPATH=$PWD/src CODA_AUTOTUNE=0
OUT=${OUT:-benchmarks/results/session56/call1}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > "$OUT/gpu.txt"
timeout 240 python -m pytest -q tests/gpu/test_triton_gpu.py -k "swiglu_grad_pack or packed_output" \
    2>&1 | tail -25 > "$OUT/gpu_tests.txt"
tail -3 "$OUT/gpu_tests.txt"
timeout 300 python benchmarks/results/session56/pack_staging_probe.py --json "$OUT/pack_staging.json" 2>&1 | tail -12
