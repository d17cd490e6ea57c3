#!/usr/bin/env bash
# Eighteenth session, second device call: each epilogue stage's cost in CODA's pick, timed back
# to back with the plain GEMM; the fast-path table with back-to-back ratios (gemm.py --rounds);
# the GPU tests of the ops and models that reduce (norm statistics, cross-entropy, bias grads).
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
d=benchmarks/results/session18
timeout 150 python $d/stages_probe.py --json $OUT/stages.json 2>&1 | tail -30
timeout 250 python benchmarks/gemm.py --no-compile --rounds 5 \
  --cases plain,bias_gelu,bias_gelu_dropout_residual,residual_rowsumsq,rowscale_swiglu,dgelu_bias_grad \
  --json $OUT/gemm_fastpath.json > $OUT/gemm_fastpath.log 2>&1
grep "paired" $OUT/gemm_fastpath.log
timeout 170 python -m pytest -q -n 8 -p no:cacheprovider tests/gpu/test_ops_linear.py tests/gpu/test_ops_gated.py \
  tests/gpu/test_ops_norms.py tests/gpu/test_ops_cross_entropy.py tests/gpu/test_nn_gpt.py 2>&1 \
  | tee $OUT/gpu_tests.txt | tail -4
