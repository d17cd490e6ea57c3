#!/usr/bin/env bash
# Eighteenth session, first device call: the fast-path table with unmasked sums (passes/edges.py),
# the cheaper dGELU and the bf16 pair conversion, then the Triton backend's GPU tests.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv > $OUT/gpu.txt
timeout 260 python benchmarks/gemm.py --no-compile \
  --cases plain,bias_gelu,bias_gelu_dropout_residual,residual_rowsumsq,rowscale_swiglu,dgelu_bias_grad \
  --json $OUT/gemm_fastpath.json > $OUT/gemm_fastpath.log 2>&1
grep "cublas median" $OUT/gemm_fastpath.log
python benchmarks/report.py --gemm $OUT/gemm_fastpath.json 2>&1 | tail -12
timeout 300 python -m pytest -q -n 8 -p no:cacheprovider tests/gpu/test_triton_gpu.py 2>&1 \
  | tee $OUT/gpu_tests.txt | tail -15
