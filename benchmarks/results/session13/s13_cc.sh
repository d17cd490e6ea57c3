#!/usr/bin/env bash
# coda+compile (required by issue 6, left out of run_all.sh) next to compile and coda, profiled
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
t0=$SECONDS
timeout 560 python benchmarks/train.py --models gpt2+llama+bert --modes compile,coda,coda+compile \
    --steps 8 --warmup 2 --curve none --profile compile,coda,coda+compile --timeout 500 \
    --json $OUT/train_cc.json > $OUT/train_cc.log 2>&1
echo "rc=$? in $((SECONDS-t0)) s" >> $OUT/train_cc.log
tail -30 $OUT/train_cc.log
