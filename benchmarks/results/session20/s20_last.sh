#!/usr/bin/env bash
# Twentieth session, third GPU call: BERT's q/k/v GEMM also takes the attention residual's
# gradient (linear(passthrough=True)); the GPU tests it touches, then the training matrix
# (torch.compile against CODA + graph, CODA profiled) on all three models.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
timeout 150 python -m pytest -q -n 8 -p no:cacheprovider tests/gpu/test_ops_linear.py \
  tests/gpu/test_hf_gpu.py 2>&1 | tee $OUT/gpu_tests.txt | tail -2
timeout 400 python benchmarks/train.py --models gpt2,llama+bert --modes compile,coda+graph \
  --profile coda+graph --steps 8 --warmup 2 --curve none --timeout 200 --json $OUT/train.json \
  > $OUT/train.log 2>&1
grep -E "tokens/s" $OUT/train.log
