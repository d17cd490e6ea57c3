#!/usr/bin/env bash
# Sixty-fourth session, call 3: which of cuBLASLt's offered algorithms beat its first pick (call 2:
# 0.878 of its time at 16384x3072x768, 0.90 at 16384x8192x2048) and what they are: each
# algorithm's configuration (cuBLASLt's enums, decoded from the device's cublasLt.h) and, under
# nsys where it exists, the kernels' names (nvjet's names spell tile, stages and cluster).
#   run(command="bash benchmarks/results/session64/call3.sh", timeout_s=300)
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee "$out/gpu.txt"
header=$(find / -name cublasLt.h -path "*include*" 2>/dev/null | head -1)
grep -nE "CUBLASLT_(MATMUL_TILE|MATMUL_STAGES|CLUSTER_SHAPE|MATMUL_INNER_SHAPE)_[A-Z0-9x_]+ *=" "$header" \
    > "$out/lt_enums.txt"
nvcc -O2 -arch=sm_90 -o /tmp/lt_epilogues benchmarks/results/session63/lt_epilogues.cu -lcublasLt \
    > "$out/lt_build.log" 2>&1 || { cat "$out/lt_build.log"; exit 1; }
shapes="16384x3072x768 16384x8192x2048"
if command -v nsys > /dev/null; then
    timeout 200 nsys profile -o /tmp/lt_algos --force-overwrite true /tmp/lt_epilogues --algos $shapes \
        > "$out/lt_algos_config.jsonl" 2> "$out/nsys.log"
    nsys stats --report cuda_gpu_kern_sum --format csv /tmp/lt_algos.nsys-rep > "$out/lt_kernels.csv" 2>> "$out/nsys.log"
else
    echo "no nsys" | tee "$out/nsys.log"
    timeout 200 /tmp/lt_epilogues --algos $shapes > "$out/lt_algos_config.jsonl"
fi
echo "rc=$? at ${SECONDS}s"
cut -c1-400 "$out/lt_algos_config.jsonl"; wc -l "$out/lt_enums.txt"
cut -d, -f1-4,9 "$out/lt_kernels.csv" 2>/dev/null | cut -c1-200 | head -30
