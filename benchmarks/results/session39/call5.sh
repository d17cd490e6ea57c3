#!/usr/bin/env bash
# Thirty-ninth session, call 5: call 4 with CODA's autotuning on, its default for users (each
# shape times its candidate configurations at its first launch): every case's fastest CODA
# kernel back to back with the fastest plain one, ABBA order, 5 rounds, the seven shapes.
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=1 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
timeout 540 python benchmarks/gemm.py --no-compile --rounds 5 \
  --cases plain,bias_gelu,bias_gelu_dropout_residual,residual_rowsumsq,rowscale_swiglu,dgelu_bias_grad \
  --json "$out/gemm_fastpath.json" > "$out/gemm_fastpath.log" 2>&1
echo "gemm rc=$?"; python benchmarks/report.py --gemm "$out/gemm_fastpath.json" 2>&1 | tail -40
