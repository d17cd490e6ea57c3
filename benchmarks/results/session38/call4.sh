#!/usr/bin/env bash
# Thirty-eighth session, call 4: GPT-2 `compile+graph` (the fastest peer) beside `coda+graph` on
# main (the one-pass LayerNorm backward through launch_cached), 30 steps each.
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
timeout 250 python benchmarks/train.py --models gpt2 --modes compile+graph,coda+graph --steps 30 --warmup 3 \
  --curve none --profile none --timeout 240 --json "$out/gpt2.json" > "$out/gpt2.log" 2>&1
echo "gpt2 rc=$?"; grep -E "tokens/s|rror" "$out/gpt2.log" | head -4
