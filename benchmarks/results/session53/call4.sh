#!/usr/bin/env bash
# The fifty-third session's fourth call: the norm-folded linears' kernels without graphs, and
# which PyTorch op launches the `memcpy128` kernel seen in CODA's rms_norm_linear step.
#   run(command="bash benchmarks/results/session53/call4.sh", timeout_s=300)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 280 python benchmarks/results/session53/norm_linear_kernels.py > "$out/kernels.log" 2>&1
echo "rc=$? at ${SECONDS}s"; grep -v -i "warn" "$out/kernels.log" | grep -v "^\s*$" | head -150 | cut -c1-170
