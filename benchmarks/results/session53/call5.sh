#!/usr/bin/env bash
# The fifty-third session's fifth call, with a leaf's gradient no longer noted (the note held dx,
# and autograd stored a copy of it as x.grad: call 1's `memcpy128`): (1) the norm-folded linears
# kernel by kernel (no graphs); (2) those two ops in the micro suite (no Liger); (3) GPT-2 beside
# compile+graph on the H200, 8 rounds (call 1: 1.199x over 6).
#   run(command="bash benchmarks/results/session53/call5.sh", timeout_s=560)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader
PYTHONPATH=$PWD/src timeout 150 python benchmarks/results/session53/norm_linear_kernels.py > "$out/kernels.log" 2>&1
echo "kernels rc=$? at ${SECONDS}s"; grep -E "^== |memcpy" "$out/kernels.log"
timeout 170 python benchmarks/micro.py --ops rms_norm_linear,layer_norm_linear --max-autotune '' --no-liger \
    --json "$out/micro.json" > "$out/micro.log" 2>&1
echo "micro rc=$? at ${SECONDS}s"; grep -A8 "replayed from CUDA" "$out/micro.log" | cut -c1-130
timeout $((545 - SECONDS)) python benchmarks/train.py --models gpt2 --modes compile+graph,coda+graph --pad-mm always \
    --steps 20 --rounds 8 --warmup 3 --curve none --profile none --timeout 200 \
    --json "$out/train_gpt2.json" > "$out/train_gpt2.log" 2>&1
echo "gpt2 rc=$? at ${SECONDS}s"; grep -E "tokens/s|round by round|rror" "$out/train_gpt2.log" | head -6
