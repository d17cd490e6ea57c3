#!/usr/bin/env bash
# Eighteenth session, third device call: the training matrix with this session's epilogues (no
# liger: its wheel is not in this checkout), JSON straight to $OUT.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
timeout 330 python benchmarks/train.py --models gpt2,llama+bert \
    --modes eager,compile,coda,coda+compile,coda+graph --steps 8 --warmup 2 \
    --curve none --timeout 200 --json $OUT/train.json > $OUT/train.log 2>&1
echo "train rc=$?" >> $OUT/train.log
grep -E "rc=|tokens/s" $OUT/train.log | tail -24
