#!/usr/bin/env bash
# Sixteenth session, second device call: the erf GELU's cost (BERT's fc1), the staged ping-pong
# SwiGLU gradient in 8 slices (timed, checked against the heuristic's outputs), the GPU tests of
# `linear`, and BERT's torch.compile and CODA + graph steps, both profiled.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
d=benchmarks/results/session16
python $d/gelu_erf_probe.py --json $OUT/gelu_erf_probe.json 2>&1 | tail -20
python benchmarks/kernel_configs.py llama --cases swiglu_grad --configs s3e8 --json $OUT/swiglu_grad_s3e8.json 2>&1 | tail -3
python -m pytest -q -x tests/gpu/test_ops_linear.py 2>&1 | tail -3
timeout 240 python benchmarks/train.py --models bert --modes compile,coda+graph --steps 8 --warmup 2 \
    --curve none --profile compile,coda+graph --json $OUT/train_bert.json > $OUT/train_bert.log 2>&1
grep -E "tokens/s|^\| bert" $OUT/train_bert.log
