#!/usr/bin/env bash
# Fifty-seventh session, call 3: the ablation probe at GPT-2's fc1 shape (call 2 ran the LLaMA
# set again by mistake and then ran out of its 500 s in the K = 768 set without a line of output)
export PYTHONPATH=$PWD/src CODA_AUTOTUNE=0
timeout 230 python benchmarks/results/session57/ablation_probe.py --sets k768 --events --json $OUT/ablation_k768.json 2>&1 | grep -v Warning | tee $OUT/ablation_k768.log
