#!/usr/bin/env bash
# Call 2 for the session after the forty-fourth: GPT-2 and BERT trained by main and by the two
# patched trees (trees.sh) beside compile+graph, interleaved rounds, one profiled step each.
#   run(command="LN_CONFIG=4,4,2,3 bash benchmarks/results/session44/call2.sh", timeout_s=600)
# (LN_CONFIG: call 1's "best:" line.)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
bash benchmarks/results/session44/trees.sh || exit 1
trees=(--tree rows=/tmp/rows/src --tree partials=/tmp/partials/src)
timeout 300 python benchmarks/train.py --models gpt2 --modes compile+graph,coda+graph "${trees[@]}" --steps 30 \
    --rounds 12 --warmup 3 --curve none --profile coda+graph --timeout 290 --json "$out/train_gpt2.json" \
    > "$out/train_gpt2.log" 2>&1
echo "gpt2 rc=$?"; grep -E "tokens/s|round by round|rror" "$out/train_gpt2.log" | head -12
timeout 230 python benchmarks/train.py --models bert --modes compile+graph,coda+graph "${trees[@]}" --steps 30 \
    --rounds 8 --warmup 3 --curve none --profile none --timeout 220 --json "$out/train_bert.json" \
    > "$out/train_bert.log" 2>&1
echo "bert rc=$?"; grep -E "tokens/s|round by round|rror" "$out/train_bert.log" | head -12
