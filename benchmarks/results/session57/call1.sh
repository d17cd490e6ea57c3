#!/usr/bin/env bash
# Fifty-seventh session, call 1: the ablation probe (where the ping-pong kernel's time goes for
# epilogues with tile operands), LLaMA-492M's SwiGLU gradient (the probe's `--sets llama` today).
export PYTHONPATH=$PWD/src CODA_AUTOTUNE=0
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $OUT/gpu.txt
timeout 540 python benchmarks/results/session57/ablation_probe.py --sets llama --json $OUT/ablation.json 2>&1 | tee $OUT/ablation.log | grep -v Warning
