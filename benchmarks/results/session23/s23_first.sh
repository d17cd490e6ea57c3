#!/usr/bin/env bash
# Twenty-third session, first device call: the activations' saved slope f'(pre) in place of the
# pre-activation. Kernel probe (fc1 forward and dh backward, before and after, tanh and erf
# GELU) and the bf16 tests of the ops and models it touches.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
timeout 280 python benchmarks/results/session23/slope_probe.py > $OUT/slope_probe.txt 2>&1
tail -40 $OUT/slope_probe.txt
timeout 270 python -m pytest -q -x -p no:cacheprovider tests/gpu/test_ops_linear.py tests/gpu/test_nn_gpt.py \
  tests/gpu/test_hf_gpu.py > $OUT/gpu_tests.txt 2>&1
tail -3 $OUT/gpu_tests.txt
