#!/usr/bin/env bash
# Forty-eighth session, second call: GPT-2's cuBLAS input-gradient GEMMs called four ways
# (memsets, time replayed; input_grad.py), then GPT-2 trained beside compile+graph on this machine.
#   run(command="bash benchmarks/results/session48/call2.sh", timeout_s=600)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv
timeout 120 python benchmarks/results/session48/input_grad.py > "$out/input_grad.log" 2>&1
echo "input_grad rc=$? at ${SECONDS}s"; grep -v -i warn "$out/input_grad.log" | tail -20
timeout 300 python benchmarks/train.py --models gpt2 --modes compile+graph,coda+graph \
    --steps 30 --rounds 6 --warmup 3 --curve none --profile coda+graph --timeout 280 \
    --json "$out/train_gpt2.json" > "$out/train_gpt2.log" 2>&1
echo "gpt2 rc=$? at ${SECONDS}s"; grep -E "tokens/s|round by round|rror" "$out/train_gpt2.log" | head -8
python benchmarks/breakdown.py "$out/train_gpt2.json" --top 30 > "$out/breakdown_gpt2.txt" 2>&1
head -50 "$out/breakdown_gpt2.txt"
