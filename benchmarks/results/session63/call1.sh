#!/usr/bin/env bash
# Sixty-third session, call 1. On an H200: GPT-2 against compile+graph in 6 interleaved rounds
# (session59/next_h200.sh's first part). On any other GPU: session62/call4.sh (pair_rows' edge
# tests, the LLaMA config sweep). Then, on either, what a tile operand costs cuBLAS: gemm.py's
# `residual` case, whose `cublaslt` column is cuBLAS's GEMM with beta = 1 reading the residual
# as C, beside CODA's plain, residual and (c) kernels.
#   run(command="bash benchmarks/results/session63/call1.sh", timeout_s=598)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
gpu=$(nvidia-smi --query-gpu=name,power.limit --format=csv,noheader); echo "$gpu" | tee "$out/gpu.txt"
case "$gpu" in
  *H200*)
    timeout 200 python benchmarks/train.py --models gpt2 --modes compile+graph,coda+graph --pad-mm always \
        --steps 20 --rounds 6 --warmup 3 --curve none --profile none --timeout 190 \
        --json "$out/train_gpt2.json" > "$out/train_gpt2.log" 2>&1
    echo "gpt2 rc=$? at ${SECONDS}s"; grep -E "tokens/s|round by round|rror" "$out/train_gpt2.log" | head -6 ;;
  *) LIMIT=330 bash benchmarks/results/session62/call4.sh ;;
esac
timeout $((585 - SECONDS)) python benchmarks/gemm.py --rounds 3 --no-compile \
    --cases plain,residual,residual_rowsumsq --json "$out/gemm_residual.json" > "$out/gemm_residual.log" 2>&1
echo "gemm rc=$? at ${SECONDS}s"; grep -v "paired" "$out/gemm_residual.log" | tail -30
