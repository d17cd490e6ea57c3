#!/usr/bin/env bash
# Sixty-fourth session, call 5 (the device time nearly spent): the GPU tests of this session's
# fixes alone (inf/NaN constants and a +inf row's log-sum-exp in every mainloop, bf16; dropout's
# probability from a CUDA tensor clamped), then call 3 if time is left.
# SHORT=1: the tests within 55 s and nothing else.
#   run(command="bash benchmarks/results/session64/call5.sh", timeout_s=130)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee "$out/gpu.txt"
timeout $(( ${SHORT:-0} ? 55 : 90 )) python -m pytest -v -n 8 -p no:cacheprovider --tb=short tests/gpu/test_triton_gpu.py \
    tests/runtime/test_binding.py -k "infinities or nearest_bound or probability" > "$out/gpu_tests.log" 2>&1
echo "tests rc=$? at ${SECONDS}s: $(grep -c PASSED "$out/gpu_tests.log") passed"
grep -E "FAILED|^E |passed|failed" "$out/gpu_tests.log" | tail -12
[ "${SHORT:-0}" = 0 ] && [ "$SECONDS" -lt 95 ] && timeout $((120 - SECONDS)) bash benchmarks/results/session64/call3.sh
