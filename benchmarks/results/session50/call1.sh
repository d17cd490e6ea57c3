#!/usr/bin/env bash
# Fiftieth session, call 1 (the forty-ninth's next_session.sh less LLaMA's training step):
# (1) tests/integrations/test_compile_gpu.py, cut by call 4's limit in the forty-ninth;
# (2) session49/call5.sh: `linear` with no epilogue as cuBLAS's GEMM (variants/cublas) against
# CODA's identity-epilogue GEMM, micro rms_norm_linear, alternating processes.
#   mkdir -p variants/cublas/benchmarks && cp -r src variants/cublas/src && cp benchmarks/*.py variants/cublas/benchmarks/ &&
#   patch -d variants/cublas -p0 < benchmarks/results/session49/linear_cublas.patch
#   run(command="bash benchmarks/results/session50/call1.sh", carry=["variants"], timeout_s=560)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader
PYTHONPATH=$PWD/src timeout 330 python -m pytest -q -x -p no:cacheprovider --durations=5 \
    tests/integrations/test_compile_gpu.py > "$out/compile_gpu_tests.log" 2>&1
echo "compile gpu tests rc=$? at ${SECONDS}s"; tail -8 "$out/compile_gpu_tests.log" | cut -c1-200
for round in 1 2; do
    for tree in main cublas; do
        script=benchmarks/micro.py; [ $tree = cublas ] && script=variants/cublas/benchmarks/micro.py
        timeout 60 python $script --ops rms_norm_linear --no-compile --no-liger \
            --json "$out/micro_${tree}_$round.json" > "$out/micro_${tree}_$round.log" 2>&1
        echo "micro $tree round $round rc=$? at ${SECONDS}s"
        grep -A4 "replayed from CUDA" "$out/micro_${tree}_$round.log" | cut -c1-120
    done
done
