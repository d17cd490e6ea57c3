#!/usr/bin/env bash
# Thirty-ninth session, call 1: each model's fastest peer (compile+graph) and CODA timed in
# interleaved rounds (train.py --rounds): 15 rounds of 30 steps, the runs of a model in turn.
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > "$out/gpu.txt"
timeout 330 python benchmarks/train.py --models gpt2,bert --modes compile+graph,coda+graph --steps 30 \
  --rounds 15 --warmup 3 --curve none --profile none --timeout 240 --json "$out/gpt2_bert.json" > "$out/gpt2_bert.log" 2>&1
echo "gpt2,bert rc=$?"; grep -E "tokens/s|round by round|rror" "$out/gpt2_bert.log" | head -12
timeout 230 python benchmarks/train.py --models llama --modes compile+graph,coda+compile,coda+graph --steps 15 \
  --rounds 9 --warmup 3 --curve none --profile none --timeout 200 --json "$out/llama.json" > "$out/llama.log" 2>&1
echo "llama rc=$?"; grep -E "tokens/s|round by round|rror" "$out/llama.log" | head -12
