#!/usr/bin/env bash
# Twenty-fourth session, second device call: BERT's loss curve (eager against CODA with the
# masked-LM head's ignored rows skipped, 200 steps) and a second run of BERT / GPT-2 against
# torch.compile.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
timeout 200 python benchmarks/train.py --models bert --modes coda+graph --steps 4 --warmup 2 --curve bert \
  --profile none --timeout 150 --json $OUT/train_curve_bert.json > $OUT/curve.log 2>&1
tail -4 $OUT/curve.log; cp docs/img/train_loss_bert.png $OUT/ 2>/dev/null
timeout 250 python benchmarks/train.py --models bert,gpt2 --modes compile,coda+graph --profile none \
  --steps 8 --warmup 2 --curve none --timeout 120 --json $OUT/train2.json > $OUT/train2.log 2>&1
grep -E "tokens/s" $OUT/train2.log
