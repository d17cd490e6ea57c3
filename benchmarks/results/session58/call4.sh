#!/usr/bin/env bash
# Fifty-eighth session, call 4: the whole GPU test suite on this build (tests/gpu, the compiled
# integrations, the examples), the accuracy table recorded.
#   run(command="bash benchmarks/results/session58/call4.sh", timeout_s=598)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee "$out/gpu.txt"
N=""; python -c "import xdist" 2>/dev/null && N="-n 8"; echo "pytest workers: ${N:-none}"
timeout 560 env CODA_ACCURACY_JSON="$out/accuracy.json" python -m pytest -q $N -p no:cacheprovider --tb=short \
    --junitxml="$out/junit.xml" tests/gpu tests/integrations/test_compile_gpu.py tests/examples \
    > "$out/gpu_tests_full.txt" 2>&1
echo "gpu tests rc=$? at ${SECONDS}s"
grep -E "passed|failed|FAILED|^ERROR" "$out/gpu_tests_full.txt" | tail -30 > "$out/gpu_tests.txt"; cat "$out/gpu_tests.txt"
