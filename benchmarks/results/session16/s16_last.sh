#!/usr/bin/env bash
# Sixteenth session, fourth device call: the training matrix of the final code (the erf GELU
# rewrite kept; the two-tile heuristic and the one-mlp BERT feed-forward reverted): run_all.sh's
# train stage, its JSON written straight to $OUT (the device time left was short).
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
timeout 250 python benchmarks/train.py --models gpt2,llama+bert \
    --modes eager,compile,liger,coda,coda+compile,coda+graph --steps 8 --warmup 2 \
    --curve none --profile coda+graph --timeout 200 --json $OUT/train.json > $OUT/train.log 2>&1
echo "train rc=$?" >> $OUT/train.log
grep -E "rc=|tokens/s" $OUT/train.log | tail -20
