#!/usr/bin/env bash
# Thirty-ninth session, call 2: GPT-2 again in interleaved rounds (a second machine start), with
# torch.compile beside compile+graph, and one profiled step of both graph modes.
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > "$out/gpu.txt"
timeout 330 python benchmarks/train.py --models gpt2 --modes compile,compile+graph,coda+graph --steps 30 \
  --rounds 15 --warmup 3 --curve none --profile compile+graph,coda+graph --timeout 260 \
  --json "$out/gpt2.json" > "$out/gpt2.log" 2>&1
echo "gpt2 rc=$?"; grep -E "tokens/s|round by round|rror" "$out/gpt2.log" | head -12
