#!/usr/bin/env bash
# Call 3 for the session after the forty-fourth: BERT trained by main and by the three patched
# trees beside compile+graph, interleaved rounds (GPT-2's in call2.sh).
#   run(command="LN_CONFIG=4,4,2,3 bash benchmarks/results/session44/call3.sh", timeout_s=600)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
bash benchmarks/results/session44/trees.sh || exit 1
timeout 400 python benchmarks/train.py --models bert --modes compile+graph,coda+graph \
    --tree rows=/tmp/rows/src --tree partials=/tmp/partials/src --tree partials_only=/tmp/partials_only/src \
    --steps 30 --rounds 10 --warmup 3 --curve none --profile coda+graph --timeout 390 \
    --json "$out/train_bert.json" > "$out/train_bert.log" 2>&1
echo "bert rc=$?"; grep -E "tokens/s|round by round|rror" "$out/train_bert.log" | head -14
