#!/usr/bin/env bash
# Twenty-third session, last device call: GPT-2's and BERT's training steps against torch.compile
# with the session's final code (the activations' saved slope; c_attn's weight gradient in its
# parameter's layout), twice, profiled.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
for run in 1 2; do
  timeout 250 python benchmarks/train.py --models gpt2,bert --modes compile,coda+graph --profile coda+graph \
    --steps 8 --warmup 2 --curve none --timeout 120 --json $OUT/train$run.json > $OUT/train$run.log 2>&1
  grep -E "tokens/s" $OUT/train$run.log
done
python benchmarks/breakdown.py $OUT/train1.json --top 30
python benchmarks/breakdown.py $OUT/train2.json --top 0
