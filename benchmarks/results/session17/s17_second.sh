#!/usr/bin/env bash
# Seventeenth session, second device call: the ping-pong kernel with three MMA warpgroups and
# outputs staged in their operands' buffers: GPU tests of the ping-pong kernels, then the
# fast-path table (every candidate timed).
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
timeout 260 python -m pytest -q -x tests/gpu/test_triton_gpu.py -k "pingpong3 or pingpong- or candidates" \
  2>&1 | tee $OUT/gpu_tests.txt | tail -5
timeout 300 python benchmarks/gemm.py --no-compile \
  --cases plain,bias_gelu,bias_gelu_dropout_residual,residual_rowsumsq,rowscale_swiglu,dgelu_bias_grad \
  --json $OUT/gemm_fastpath.json > $OUT/gemm_fastpath.log 2>&1
tail -45 $OUT/gemm_fastpath.log
