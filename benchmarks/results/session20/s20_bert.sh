#!/usr/bin/env bash
# Twentieth session, second GPU call: BERT's feed-forward as one mlp (residual x folded into dx's
# epilogue, the norm's sums from fc2's): the GPU tests it touches, then BERT's step against
# torch.compile (profiled), and GPT-2's step profiled (what to take on next).
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
timeout 200 python -m pytest -q -n 8 -p no:cacheprovider tests/gpu/test_ops_linear.py \
  tests/gpu/test_hf_gpu.py tests/integrations/test_compile_gpu.py 2>&1 | tee $OUT/gpu_tests.txt | tail -3
timeout 230 python benchmarks/train.py --models bert --modes compile,coda+graph,coda+compile \
  --profile coda+graph --steps 8 --warmup 2 --curve none --timeout 200 --json $OUT/train_bert.json \
  > $OUT/train_bert.log 2>&1
grep -E "tokens/s" $OUT/train_bert.log
timeout 120 python benchmarks/train.py --models gpt2 --modes coda+graph --profile coda+graph \
  --steps 8 --warmup 2 --curve none --timeout 100 --json $OUT/train_gpt2.json > $OUT/train_gpt2.log 2>&1
grep -E "tokens/s" $OUT/train_gpt2.log
