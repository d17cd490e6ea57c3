#!/usr/bin/env bash
# Seventeenth session, last device call: the final code (outputs staged in their operand's
# buffer): GPU tests of the programs it touches in the
# ping-pong and default kernels, the linear ops' tests, then the fast-path table.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
timeout 200 python -m pytest -q tests/gpu/test_triton_gpu.py \
  -k "(pingpong- or default-) and (dropout or residual or dgelu or identity) or candidates or cuda_graph" \
  2>&1 | tee $OUT/gpu_tests.txt | tail -4
timeout 80 python -m pytest -q tests/gpu/test_ops_linear.py 2>&1 | tee -a $OUT/gpu_tests.txt | tail -2
timeout 280 python benchmarks/gemm.py --no-compile \
  --cases plain,bias_gelu,bias_gelu_dropout_residual,residual_rowsumsq,rowscale_swiglu,dgelu_bias_grad \
  --json $OUT/gemm_fastpath.json > $OUT/gemm_fastpath.log 2>&1
grep "cublas median" $OUT/gemm_fastpath.log
python benchmarks/report.py --gemm $OUT/gemm_fastpath.json 2>&1 | tail -30
# (fourth call, after the heuristic's change to 2 slices; its log is gpu_tests_final.txt)
# CODA_AUTOTUNE=0 python -m pytest -q -n 8 -p no:cacheprovider tests/gpu/test_triton_gpu.py \
#   tests/gpu/test_ops_linear.py tests/gpu/test_ops_gated.py tests/gpu/test_nn_gpt.py
