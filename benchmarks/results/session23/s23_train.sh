#!/usr/bin/env bash
# Twenty-third session: GPT-2's and BERT's training steps against torch.compile, profiled (the
# 40 longest kernels listed).
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
timeout 400 python benchmarks/train.py --models gpt2,bert --modes compile,coda+graph --profile coda+graph \
  --steps 8 --warmup 2 --curve none --timeout 200 --json $OUT/train.json > $OUT/train.log 2>&1
grep -E "tokens/s" $OUT/train.log
python benchmarks/breakdown.py $OUT/train.json --top 40
