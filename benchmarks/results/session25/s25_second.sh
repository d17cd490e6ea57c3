#!/usr/bin/env bash
# Twenty-fifth session, second device call: ce_probe2.py (the forward with and without the target
# logit alternated; the gradient map at a 128-byte row stride), and GPT-2 / BERT in CODA + graph
# mode with the target logit as a gather-dot, profiled.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
timeout 200 python benchmarks/results/session25/ce_probe2.py > $OUT/ce_probe2.txt 2>&1; cat $OUT/ce_probe2.txt
timeout 250 python benchmarks/train.py --models gpt2,bert --modes coda+graph --profile coda+graph \
  --steps 8 --warmup 2 --curve none --timeout 120 --json $OUT/train.json > $OUT/train.log 2>&1
grep -E "tokens/s" $OUT/train.log
python benchmarks/breakdown.py $OUT/train.json --top 16
