#!/usr/bin/env bash
# Forty-second session, call 5, after reverting the epilogue's col_sum on the tensor cores (A's
# column sums stay on them): every CODA GEMM launch of a GPT-2 step beside cuBLAS, and GPT-2
# against compile+graph in 10 interleaved rounds.
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
timeout 80 python benchmarks/kernel_configs.py gpt2 --configs none-but-the-heuristic \
    --json "$out/gpt2_launches.json" > "$out/gpt2_launches.log" 2>&1
echo "launches rc=$?"; python benchmarks/results/session42/launches_table.py "$out/gpt2_launches.json" | grep -v ce_
timeout 200 python benchmarks/train.py --models gpt2 --modes compile+graph,coda+graph --steps 30 --rounds 10 \
  --warmup 3 --curve none --profile none --timeout 190 --json "$out/train.json" > "$out/train.log" 2>&1
echo "train rc=$?"; grep -E "tokens/s|round by round|rror" "$out/train.log" | head -8
