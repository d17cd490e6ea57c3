#!/usr/bin/env bash
# Forty-seventh session, call 2: LayerNorm's backward as landed against the kernel before it
# (ln_backward_sweep.py), then BERT trained by main beside compile+graph, 10 rounds.
#   mkdir -p variants && git show 6114727:src/coda/nn/layer_norm_grad.py > variants/old_lng.py
#   run(command="bash benchmarks/results/session47/call2.sh", carry=["variants"], timeout_s=600)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
timeout 120 python benchmarks/results/session47/ln_backward_sweep.py --old variants/old_lng.py > "$out/ln_sweep.log" 2>&1
echo "sweep rc=$? at ${SECONDS}s"; grep -v Warning "$out/ln_sweep.log" | head -40
timeout 260 python benchmarks/train.py --models bert --modes compile+graph,coda+graph \
    --steps 30 --rounds 10 --warmup 3 --curve none --profile coda+graph --timeout 250 \
    --json "$out/train_bert.json" > "$out/train_bert.log" 2>&1
echo "bert rc=$? at ${SECONDS}s"; grep -E "tokens/s|round by round|rror" "$out/train_bert.log" | head -8
