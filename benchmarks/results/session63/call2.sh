#!/usr/bin/env bash
# Sixty-third session, call 2: cuBLASLt's own fused epilogues over its plain GEMM
# (lt_epilogues.cu, built there, the heuristic's first algorithm; run before --first existed, when
# that was all it ran), then gemm.py's cases with a tile operand or a vendor form, the
# vendor's forms (cuBLASLt's bias+GELU, cuBLAS's beta = 1 residual) timed back to back with
# cuBLAS's plain GEMM (320 s at most: what the session's device time left).
#   run(command="bash benchmarks/results/session63/call2.sh", timeout_s=330)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
gpu=$(nvidia-smi --query-gpu=name,power.limit --format=csv,noheader); echo "$gpu" | tee "$out/gpu.txt"
here=benchmarks/results/session63
nvcc -O2 -arch=sm_90 -o /tmp/lt_epilogues $here/lt_epilogues.cu -lcublasLt > "$out/lt_build.log" 2>&1 \
    && timeout 60 /tmp/lt_epilogues --first 16384x3072x768 16384x768x3072 8192x11008x4096 8192x4096x11008 \
        16384x8192x2048 4096x4096x4096 8192x8192x8192 > "$out/lt_epilogues.jsonl" 2>&1
echo "lt rc=$? at ${SECONDS}s"; cat "$out/lt_build.log" "$out/lt_epilogues.jsonl" | tail -30
timeout $((315 - SECONDS)) python benchmarks/gemm.py --rounds 3 --no-compile \
    --cases plain,bias_gelu,residual,residual_rowsumsq,dgelu_bias_grad \
    --json "$out/gemm_fastpath.json" > "$out/gemm_fastpath.log" 2>&1
echo "gemm rc=$? at ${SECONDS}s"; grep "paired" "$out/gemm_fastpath.log" | tail -60
python benchmarks/report.py --gemm "$out/gemm_fastpath.json" 2>&1 | tail -52
