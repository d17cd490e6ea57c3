#!/usr/bin/env bash
# Session 28, call 2: clocks and power under each epilogue (is the epilogue's cost energy?),
# then issue 8's fast-path table (last run in the twentieth session).
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
cd benchmarks
timeout 120 python power_probe.py --json $OUT/power_fc1.json > $OUT/power.log 2>&1; echo "power rc=$?"
timeout 60 python power_probe.py --shape 16384x768x768 --variants plain,bias_residual,bias_residual_stats \
  --json $OUT/power_768.json >> $OUT/power.log 2>&1; echo "power768 rc=$?"
grep "^{" $OUT/power.log
cd ..
timeout 300 python benchmarks/gemm.py --no-compile --rounds 5 \
  --cases plain,bias_gelu,bias_gelu_dropout_residual,residual_rowsumsq,rowscale_swiglu,dgelu_bias_grad \
  --json $OUT/gemm_fastpath.json > $OUT/gemm_fastpath.log 2>&1
echo "gemm rc=$?"; python benchmarks/report.py --gemm $OUT/gemm_fastpath.json 2>&1 | tail -40
