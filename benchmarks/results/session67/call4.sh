#!/usr/bin/env bash
# Sixty-seventh session, call 4 (the session's last device seconds): GPT-2 against compile+graph
# in 6 interleaved rounds, on whichever GPU comes (the target is read on an H200).
#   run(command="bash benchmarks/results/session67/call4.sh", timeout_s=140)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee "$out/gpu.txt"
timeout 125 python benchmarks/train.py --models gpt2 --modes compile+graph,coda+graph --pad-mm always \
    --steps 15 --rounds 6 --warmup 3 --curve none --profile none --timeout 120 \
    --json "$out/train_gpt2.json" > "$out/train_gpt2.log" 2>&1
echo "gpt2 rc=$? at ${SECONDS}s"; grep -E "tokens/s|round by round|rror" "$out/train_gpt2.log" | head -6
