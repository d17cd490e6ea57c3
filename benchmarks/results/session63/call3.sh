#!/usr/bin/env bash
# Sixty-third session, call 3: lt_epilogues.cu again, each GEMM in the fastest of the algorithms
# cuBLASLt's heuristic offers (call 2 ran its first: dGELU + bias gradient 4.1x its plain GEMM).
#   run(command="bash benchmarks/results/session63/call3.sh", timeout_s=120)
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee "$out/gpu.txt"
nvcc -O2 -arch=sm_90 -o /tmp/lt_epilogues benchmarks/results/session63/lt_epilogues.cu -lcublasLt \
    > "$out/lt_build.log" 2>&1 \
    && timeout 90 /tmp/lt_epilogues 16384x3072x768 16384x768x3072 8192x11008x4096 8192x4096x11008 \
        16384x8192x2048 4096x4096x4096 8192x8192x8192 > "$out/lt_epilogues_fastest.jsonl" 2>&1
echo "lt rc=$? at ${SECONDS}s"; cat "$out/lt_build.log" "$out/lt_epilogues_fastest.jsonl" | tail -30
