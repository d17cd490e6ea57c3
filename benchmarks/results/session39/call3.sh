#!/usr/bin/env bash
# Thirty-ninth session, call 3: issue 8's fast-path table on today's main (its last run was the
# twenty-eighth session's): every case's fastest CODA kernel back to back with the fastest plain
# one, 5 rounds, the seven shapes. CODA_AUTOTUNE from the environment (default 0: the heuristic's
# configurations).
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=${CODA_AUTOTUNE:-0} PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
timeout 540 python benchmarks/gemm.py --no-compile --rounds 5 \
  --cases plain,bias_gelu,bias_gelu_dropout_residual,residual_rowsumsq,rowscale_swiglu,dgelu_bias_grad \
  --json "$out/gemm_fastpath.json" > "$out/gemm_fastpath.log" 2>&1
echo "gemm rc=$?"; python benchmarks/report.py --gemm "$out/gemm_fastpath.json" 2>&1 | tail -40
