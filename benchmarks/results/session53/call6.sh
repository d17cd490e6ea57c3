#!/usr/bin/env bash
# The fifty-third session's sixth call: with dx's GEMM leaving the bias gradient to a column-sum
# map from K = 4096 on (call 5: CODA's summing GEMM 1195 us against cuBLAS's 991 + 80 at
# layer_norm_linear's dx, LLaMA-7B size): that op's kernels, then layer_norm_linear at the two
# sizes whose dx has K >= 4096 in the micro suite (no Liger).
#   run(command="bash benchmarks/results/session53/call6.sh", timeout_s=300)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader
PYTHONPATH=$PWD/src timeout 80 python benchmarks/results/session53/norm_linear_kernels.py \
    --cases layer_norm_linear:llama7b > "$out/kernels.log" 2>&1
echo "kernels rc=$? at ${SECONDS}s"; grep -v -i warn "$out/kernels.log" | grep -A9 "^== " | cut -c1-120 | head -40
timeout 120 python benchmarks/micro.py --ops layer_norm_linear --sizes llama1b,llama7b --max-autotune '' --no-liger \
    --json "$out/micro.json" > "$out/micro.log" 2>&1
echo "micro rc=$? at ${SECONDS}s"; grep -A8 "replayed from CUDA" "$out/micro.log" | cut -c1-130
