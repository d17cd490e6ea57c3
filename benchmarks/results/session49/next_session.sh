#!/usr/bin/env bash
# For the fiftieth session's first call (prepared in the forty-ninth, not run): what this session
# could not finish on the GPU. (1) tests/integrations/test_compile_gpu.py, which call 4 cut at its
# 230 s limit (coda::rms_norm is new); (2) call5.sh's A/B: `linear` with no epilogue as cuBLAS's
# GEMM (variants/cublas, linear_cublas.patch) against CODA's identity-epilogue GEMM; (3) LLaMA's
# training step on main beside compile+graph (H100 in this session: 1.031x; the H200's last:
# 1.016x, before RMSNorm's one-pass backward).
#   mkdir -p variants/cublas/benchmarks && cp -r src variants/cublas/src && cp benchmarks/*.py variants/cublas/benchmarks/ &&
#   patch -d variants/cublas -p0 < benchmarks/results/session49/linear_cublas.patch
#   run(command="bash benchmarks/results/session49/next_session.sh", carry=["variants"], timeout_s=590)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader
PYTHONPATH=$PWD/src timeout 200 python -m pytest -q -x -p no:cacheprovider tests/integrations/test_compile_gpu.py \
    > "$out/compile_gpu_tests.log" 2>&1
echo "compile gpu tests rc=$? at ${SECONDS}s"; tail -3 "$out/compile_gpu_tests.log" | cut -c1-200
bash benchmarks/results/session49/call5.sh
timeout $((585 - SECONDS)) python benchmarks/train.py --models llama --modes compile+graph,coda+graph \
    --steps 20 --rounds 6 --warmup 3 --curve none --profile none --timeout 300 \
    --json "$out/train_llama.json" > "$out/train_llama.log" 2>&1
echo "llama rc=$? at ${SECONDS}s"; grep -E "tokens/s|round by round|rror" "$out/train_llama.log" | head -8
