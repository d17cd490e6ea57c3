#!/usr/bin/env bash
# The fifty-second session's fifth call: this session's later changes on the GPU: the HF, launch
# (capture_step) and compile GPU tests (the device budget left no room for more).
#   run(command="bash benchmarks/results/session52/call5.sh", timeout_s=280)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader
PYTHONPATH=$PWD/src timeout 200 python -m pytest -q -n 4 -p no:cacheprovider tests/gpu/test_hf_gpu.py \
    tests/gpu/test_launch_gpu.py tests/integrations/test_compile_gpu.py > "$out/tests.log" 2>&1
echo "tests rc=$? at ${SECONDS}s"; tail -3 "$out/tests.log"
