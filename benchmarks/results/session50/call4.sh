#!/usr/bin/env bash
# Fiftieth session, call 4: main (the norms' backward prefetch, `linear` without an epilogue on
# cuBLAS): the whole micro suite (liger carried), then GPT-2 beside compile+graph, 8 rounds.
#   run(command="bash benchmarks/results/session50/call4.sh", carry=[".whl"], timeout_s=598)
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader
timeout 420 python benchmarks/micro.py --max-autotune '' --json "$out/micro.json" > "$out/micro.log" 2>&1
echo "micro rc=$? at ${SECONDS}s"; grep -A24 "replayed from CUDA" "$out/micro.log" | cut -c1-130
timeout $((590 - SECONDS)) python benchmarks/train.py --models gpt2 --modes compile+graph,coda+graph \
    --pad-mm always --steps 20 --rounds 8 --warmup 3 --curve none --profile none --timeout 120 \
    --json "$out/train_gpt2.json" > "$out/train_gpt2.log" 2>&1
echo "gpt2 rc=$? at ${SECONDS}s"; grep -E "tokens/s|round by round|rror" "$out/train_gpt2.log" | head -8
