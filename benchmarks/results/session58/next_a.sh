#!/usr/bin/env bash
# For the next session (prepared in the fifty-eighth, not run): the GPU suite in two calls that
# each fit the device's 600 s, named results (-v) so a cut run still says what failed. Part A:
# the float32 layer-scale test first (3xTF32 at torch's default precision, unverified on a GPU),
# then tests/gpu/test_triton_gpu.py.
#   run(command="bash benchmarks/results/session58/next_a.sh", timeout_s=598)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee "$out/gpu.txt"
timeout 120 python -m pytest -v -p no:cacheprovider --tb=short tests/examples/test_layer_scale.py \
    > "$out/layer_scale.txt" 2>&1
echo "layer_scale rc=$? at ${SECONDS}s"; grep -E "PASSED|FAILED|^E .*assert" "$out/layer_scale.txt" | tail -12
GIB=$(python -c "import torch; print(torch.cuda.get_device_properties(0).total_memory >> 30)")
WORKERS=$(( GIB >= 120 ? 8 : GIB >= 70 ? 4 : 2 ))
timeout 440 python -m pytest -v -n $WORKERS -p no:cacheprovider --tb=short tests/gpu/test_triton_gpu.py \
    > "$out/triton_gpu.txt" 2>&1
echo "test_triton_gpu rc=$? at ${SECONDS}s"; grep -E "FAILED|ERROR" "$out/triton_gpu.txt" | tail -20
grep -cE "PASSED" "$out/triton_gpu.txt"; tail -1 "$out/triton_gpu.txt"
