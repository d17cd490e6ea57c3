#!/usr/bin/env bash
# Prepared in the forty-ninth session, not run (its device time ran out): `linear` with no bias, activation
# or dropout as cuBLAS's GEMM (variants/cublas: this tree plus that change) against CODA's
# identity-epilogue GEMM (this tree), in the micro suite's rms_norm_linear (whose route without
# sumsq ends in such a linear), alternating processes.
#   mkdir -p variants/cublas/benchmarks && cp -r src variants/cublas/src && cp benchmarks/*.py variants/cublas/benchmarks/ &&
#   patch -d variants/cublas -p0 < benchmarks/results/session49/linear_cublas.patch
#   run(command="bash benchmarks/results/session49/call5.sh", carry=["variants"], timeout_s=100)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
out=${OUT:-/tmp}
for tree in main cublas; do
    script=benchmarks/micro.py; [ $tree = cublas ] && script=variants/cublas/benchmarks/micro.py
    timeout 45 python $script --ops rms_norm_linear --no-compile --no-liger \
        --json "$out/micro_$tree.json" > "$out/micro_$tree.log" 2>&1
    echo "micro $tree rc=$? at ${SECONDS}s"; grep -A4 "replayed from CUDA" "$out/micro_$tree.log" | cut -c1-120
done
