#!/usr/bin/env bash
# Sixtieth session, call 1 (any GPU, about 4 minutes):
#  1. session59/next_dram.sh: Nsight Compute's DRAM bytes and L2 hit rate of plain, (c) and (b)
#     (does a tile operand evict A's and B's lines from L2?); also the refactored profile path;
#  2. clock_probe.py on plain, (c) and (e) at K = 768: does a tile operand's DRAM traffic lower the
#     clock at the power cap (energy), or cost cycles at the same clock (bandwidth, latency)?
#  3. gemm.py on one shape after the fifty-ninth session's refactor (gemm.inputs, used_operands).
#   run(command="bash benchmarks/results/session60/call1.sh", timeout_s=598)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
bash benchmarks/results/session59/next_dram.sh 2>&1 | tee "$out/dram.log"
timeout 170 python benchmarks/results/session59/clock_probe.py --shapes 16384x3072x768 \
    --cases plain,residual_rowsumsq,dgelu_bias_grad --json "$out/clock_k768.json" > "$out/clock_k768.log" 2>&1
echo "clock rc=$? at ${SECONDS}s"; grep -E "^\{|rror" "$out/clock_k768.log" | cut -c1-260
timeout $((590 - SECONDS)) python benchmarks/gemm.py --shapes 16384x3072x768 --rounds 3 --no-compile \
    --cases plain,bias_gelu,residual_rowsumsq --json "$out/gemm_k768.json" > "$out/gemm_k768.log" 2>&1
echo "gemm rc=$? at ${SECONDS}s"; tail -15 "$out/gemm_k768.log"
