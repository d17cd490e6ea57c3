#!/usr/bin/env bash
# For a session whose machine is an H200 (the targets of issues 6 and 8 are read there; the last
# H200 readings are the 53rd session's GPT-2 ratio and the 39th/42nd sessions' fast-path table):
# (1) GPT-2 against compile+graph, 6 interleaved rounds (session67/call4.sh, about 125 s);
# (2) issue 8's table in what is left of LIMIT (gemm.py's paired rounds, as the 57th session's
# call 6 ran it on an H100). On another GPU it says so and stops: those readings exist.
#   run(command="bash benchmarks/results/session70/next_session.sh", kind="nvidia-h200", timeout_s=595)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}; LIMIT=${LIMIT:-580}
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee "$out/gpu.txt"
grep -q H200 "$out/gpu.txt" || { echo "not an H200: nothing to read here"; exit 0; }
mkdir -p "$out/gpt2" && OUT=$out/gpt2 bash benchmarks/results/session67/call4.sh
timeout $((LIMIT - SECONDS)) python benchmarks/gemm.py --rounds 5 --no-compile \
    --cases plain,bias_gelu,bias_gelu_dropout_residual,residual_rowsumsq,rowscale_swiglu,dgelu_bias_grad \
    --json "$out/gemm_fastpath.json" > "$out/gemm_fastpath.log" 2>&1
echo "gemm rc=$? at ${SECONDS}s"; grep "over plain, paired" "$out/gemm_fastpath.log" | head -42
