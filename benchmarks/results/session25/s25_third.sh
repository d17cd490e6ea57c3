#!/usr/bin/env bash
# Twenty-fifth session, third device call: order_probe.py (the epilogue's stores, tiles first or
# last; the gradient map's tiles at more vocabularies), the GPU tests of the Triton kernels and the
# cross-entropy, GPT-2 in CODA + graph mode against torch.compile.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
timeout 150 python benchmarks/results/session25/order_probe.py > $OUT/order_probe.txt 2>&1; cat $OUT/order_probe.txt
timeout 150 python -m pytest -q -x -n 8 -p no:cacheprovider tests/gpu/test_triton_gpu.py \
  tests/gpu/test_ops_cross_entropy.py > $OUT/gpu_tests.txt 2>&1; tail -3 $OUT/gpu_tests.txt
timeout 150 python benchmarks/train.py --models gpt2 --modes compile,coda+graph --profile none \
  --steps 8 --warmup 2 --curve none --timeout 100 --json $OUT/train_gpt2.json > $OUT/train_gpt2.log 2>&1
grep -hE "tokens/s" $OUT/train_*.log
