#!/usr/bin/env bash
# Session 56, call 5: the packed SwiGLU gradient by default in the ping-pong kernel with shared
# operand buffers: the GPU tests of the programs and ops it runs, then the micro suite with Liger.
#   run(command="bash benchmarks/results/session56/call5.sh", carry=[".whl"], timeout_s=598)
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
OUT=${OUT:-benchmarks/results/session56/call5}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee "$OUT/gpu.txt"
N=""; python -c "import xdist" 2>/dev/null && N="-n 4"
PYTHONPATH=$PWD/src timeout 230 python -m pytest -q $N tests/gpu/test_triton_gpu.py tests/gpu/test_ops_gated.py \
    tests/gpu/test_hf_gpu.py -k "swiglu or gated or pingpong or packed or llama or qwen2 or phi3" \
    > "$OUT/gpu_tests_full.txt" 2>&1
echo "gpu tests rc=$? at ${SECONDS}s"; tail -25 "$OUT/gpu_tests_full.txt" > "$OUT/gpu_tests.txt"
rm "$OUT/gpu_tests_full.txt"; tail -3 "$OUT/gpu_tests.txt"
PYTHONPATH=/tmp/site timeout 330 python benchmarks/micro.py --max-autotune '' --json "$OUT/micro.json" \
    > "$OUT/micro.log" 2>&1
echo "micro rc=$? at ${SECONDS}s"; grep -A24 "replayed from CUDA" "$OUT/micro.log" | cut -c1-130
