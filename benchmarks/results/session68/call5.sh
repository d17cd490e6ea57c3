#!/usr/bin/env bash
# Sixty-eighth session, call 5: issue 8's (b) column (bias + GELU + dropout + residual) against the
# plain GEMM on the build whose dropout multiplies by where(keep, 1/(1-p), 0) (a dropped NaN
# stays NaN), to compare with the fifty-seventh session's H100 column (1.48 / 1.15 / 1.13 / 1.04 /
# 1.24 / 1.11 / 1.05).
#   run(command="bash benchmarks/results/session68/call5.sh", timeout_s=420)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee "$out/gpu.txt"
timeout 400 python benchmarks/gemm.py --rounds 3 --no-compile --cases plain,bias_gelu_dropout_residual \
    --json "$out/gemm_dropout.json" > "$out/gemm_dropout.log" 2>&1
echo "gemm rc=$? at ${SECONDS}s"; grep "paired" "$out/gemm_dropout.log" | tail -20
