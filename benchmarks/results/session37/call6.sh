#!/usr/bin/env bash
# Thirty-seventh session, call 6: does the one-pass LayerNorm backward (two Triton JIT launches
# from Python) cost host time where no CUDA graph hides it? GPT-2 and BERT `coda` (no graph),
# before (variants/main) and after (variants/ln1), twice each, interleaved.
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
out=${OUT:-/tmp}
for round in 1 2; do
  for v in main ln1; do
    PYTHONPATH=$PWD/variants/$v/src timeout 120 python variants/$v/benchmarks/train.py --models gpt2,bert \
      --modes coda --steps 20 --warmup 3 --curve none --profile none --timeout 110 \
      --json "$out/${v}_$round.json" > "$out/${v}_$round.log" 2>&1
    echo "$v round $round rc=$?"; grep -E "tokens/s|rror" "$out/${v}_$round.log" | head -3
  done
done
