#!/usr/bin/env bash
# The fifty-third session's third call: call 1's norm-linear probe met an illegal memory access
# in its second case (rms_norm_linear at LLaMA-1B size, after the GPT-2 case in the same
# process): that case alone in a fresh process, then both again, printing each graph replayed.
#   run(command="bash benchmarks/results/session53/call3.sh", timeout_s=400)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 150 python benchmarks/results/session53/norm_linear_probe.py --ops rms_norm_linear --sizes llama1b \
    --json "$out/alone.json" > "$out/alone.log" 2>&1
echo "alone rc=$? at ${SECONDS}s"; grep -E "^==|replaying|Error|error" "$out/alone.log" | tail -5
timeout 200 python benchmarks/results/session53/norm_linear_probe.py --ops rms_norm_linear --sizes gpt2,llama1b \
    --json "$out/both.json" > "$out/both.log" 2>&1
echo "both rc=$? at ${SECONDS}s"; grep -E "^==|replaying|Error|error" "$out/both.log" | tail -8
