#!/usr/bin/env bash
# Forty-seventh session, call 2: GPT-2 and BERT trained by main (LayerNorm's backward a row a
# warp) beside compile+graph, 10 rounds each, round by round ratios.
#   run(command="bash benchmarks/results/session47/call2.sh", timeout_s=600)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
for model in gpt2 bert; do
    timeout 270 python benchmarks/train.py --models $model --modes compile+graph,coda+graph \
        --steps 30 --rounds 10 --warmup 3 --curve none --profile coda+graph --timeout 260 \
        --json "$out/train_$model.json" > "$out/train_$model.log" 2>&1
    echo "$model rc=$? at ${SECONDS}s"; grep -E "tokens/s|round by round|rror" "$out/train_$model.log" | head -8
done
