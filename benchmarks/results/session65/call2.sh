#!/usr/bin/env bash
# Sixty-fifth session, call 2: the rest of tests/gpu/run_all.sh after call 1's part: the HF
# models' GPU tests, torch.compile's and the examples' (workers by the GPU's memory, as
# run_all.sh picks them), then `coda train --compare` and the launch counts.
#   run(command="bash benchmarks/results/session65/call2.sh", timeout_s=600)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}; LIMIT=${LIMIT:-585}
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee "$out/gpu.txt"
GIB=$(python -c "import torch; print(torch.cuda.get_device_properties(0).total_memory >> 30)")
WORKERS=$(( GIB >= 120 ? 8 : 4 ))
timeout $((LIMIT - 150)) python -m pytest -v -n $WORKERS -p no:cacheprovider --tb=short \
    tests/gpu/test_hf_gpu.py tests/integrations/test_compile_gpu.py tests/examples > "$out/gpu_tests.log" 2>&1
echo "tests rc=$? at ${SECONDS}s: $(grep -c PASSED "$out/gpu_tests.log") passed, $(grep -c FAILED "$out/gpu_tests.log") failed"
grep -E "FAILED|^E |passed|failed" "$out/gpu_tests.log" | tail -25
timeout $((LIMIT - SECONDS - 50)) python -m coda train --compare --out "$out/train_compare.png" > "$out/train_compare.log" 2>&1
echo "train --compare rc=$? at ${SECONDS}s"; tail -5 "$out/train_compare.log"
timeout $((LIMIT - SECONDS)) python benchmarks/launch_counts.py --json "$out/launch_counts.json" > "$out/launch_counts.log" 2>&1
echo "launch_counts rc=$? at ${SECONDS}s"; tail -8 "$out/launch_counts.log"
