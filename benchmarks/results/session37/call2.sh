#!/usr/bin/env bash
# Thirty-seventh session, call 2: the one-pass LayerNorm backward's variants against the two maps,
# then GPT-2's coda+graph step profiled (where its 28 ms go now).
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
timeout 300 python benchmarks/results/session37/ln_grad_probe.py --json "$out/ln_grad_probe.json" > "$out/ln_grad_probe.txt" 2>&1
echo "probe rc=$?"; grep -E "two maps|fastest|WRONG|rror" "$out/ln_grad_probe.txt"
timeout 150 python benchmarks/train.py --models gpt2 --modes coda+graph --steps 30 --warmup 3 \
  --curve none --profile coda+graph --timeout 140 --json "$out/gpt2_profile.json" > "$out/gpt2_profile.log" 2>&1
echo "train rc=$?"; grep -E "tokens/s|rror" "$out/gpt2_profile.log" | head -4
