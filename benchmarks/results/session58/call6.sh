#!/usr/bin/env bash
# Fifty-eighth session, call 6: the whole GPU suite again on this build (float32 GEMMs at torch's
# matmul precision), with tests/gpu/run_all.sh's worker count for this GPU's memory.
#   run(command="bash benchmarks/results/session58/call6.sh", timeout_s=598)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee "$out/gpu.txt"
GIB=$(python -c "import torch; print(torch.cuda.get_device_properties(0).total_memory >> 30)")
WORKERS=$(( GIB >= 120 ? 8 : GIB >= 70 ? 4 : 2 )); echo "$GIB GiB: $WORKERS workers"
timeout 545 env CODA_ACCURACY_JSON="$out/accuracy.json" python -m pytest -q -n $WORKERS -p no:cacheprovider \
    --tb=short --junitxml="$out/junit.xml" tests/gpu tests/integrations/test_compile_gpu.py tests/examples \
    > "$out/gpu_tests_full.txt" 2>&1
echo "gpu tests rc=$? at ${SECONDS}s"
grep -E "passed|failed|FAILED|^E  .*(Error|assert)" "$out/gpu_tests_full.txt" | tail -30 > "$out/gpu_tests.txt"
cat "$out/gpu_tests.txt"
