#!/usr/bin/env bash
# The fifty-second session's third call: one profiled step of GPT-2 and of LLaMA, compile+graph
# and coda+graph, on this session's main (the last per-kernel breakdown is the 39th session's).
#   run(command="bash benchmarks/results/session52/call3.sh", timeout_s=400)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader
for model in gpt2 llama; do
    timeout 170 python benchmarks/train.py --models $model --modes compile+graph,coda+graph --pad-mm always \
        --steps 10 --rounds 1 --warmup 3 --curve none --profile compile+graph,coda+graph --timeout 160 \
        --json "$out/profile_$model.json" > "$out/profile_$model.log" 2>&1
    echo "$model rc=$? at ${SECONDS}s"; grep -E "tokens/s|rror" "$out/profile_$model.log" | head -4
done
