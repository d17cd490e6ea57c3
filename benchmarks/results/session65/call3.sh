#!/usr/bin/env bash
# Sixty-fifth session, call 3 (little device time left): the GPU tests this session added or
# mended after call 1 — infinities in every mainloop (the sign test off |h| ~ 0), reductions
# stored in bfloat16 or float64 (A's column sums too), the kept partials on two streams.
#   run(command="bash benchmarks/results/session65/call3.sh", timeout_s=100)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee "$out/gpu.txt"
timeout 85 python -m pytest -v -n 7 -p no:cacheprovider --tb=short tests/gpu/test_triton_gpu.py \
    -k "infinities or stored_in_another_dtype or two_streams" > "$out/gpu_tests.log" 2>&1
echo "tests rc=$? at ${SECONDS}s: $(grep -c PASSED "$out/gpu_tests.log") passed, $(grep -c FAILED "$out/gpu_tests.log") failed"
grep -E "FAILED|^E |passed|failed" "$out/gpu_tests.log" | tail -12
