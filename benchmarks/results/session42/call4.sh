#!/usr/bin/env bash
# Forty-second session, call 4, on the commit with the column sums on the tensor cores: issue 8's
# fast-path table (the thirty-ninth session's call 3 command: six cases, seven shapes, 5 rounds,
# ABBA pairs, the heuristic's configurations) and every CODA GEMM launch of a GPT-2 step beside
# cuBLAS (the forty-first session's call 1 command).
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > "$out/gpu.txt"
timeout 100 python benchmarks/kernel_configs.py gpt2 --configs none-but-the-heuristic \
    --json "$out/gpt2_launches.json" > "$out/gpt2_launches.log" 2>&1
echo "launches rc=$?"; python benchmarks/results/session42/launches_table.py "$out/gpt2_launches.json"
timeout 420 python benchmarks/gemm.py --no-compile --rounds 5 \
  --cases plain,bias_gelu,bias_gelu_dropout_residual,residual_rowsumsq,rowscale_swiglu,dgelu_bias_grad \
  --json "$out/gemm_fastpath.json" > "$out/gemm_fastpath.log" 2>&1
echo "gemm rc=$?"; python benchmarks/report.py --gemm "$out/gemm_fastpath.json" 2>&1 | tail -14
