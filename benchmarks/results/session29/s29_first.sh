#!/usr/bin/env bash
# Twenty-ninth session, first device call.
# 1. What the ping-pong epilogue's stages cost when its outputs are stored from registers instead of
#    through shared memory and TMA (pingpong_r, pingpong2_r), beside the staged kernel, and what
#    GELU's cost is made of (bias_fma4, bias_tanh).
# 2. Where a captured GPT-2 step's idle time between kernels goes.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
timeout 330 python benchmarks/ablation.py --configs pingpong,pingpong_r,pingpong2_r \
  --shapes 16384x3072x768,16384x768x768 \
  --variants plain,bias,bias_fma4,bias_tanh,bias_gelu,bias_gelu_slope,bias_residual_stats \
  --json $OUT/ablation_stores.json > $OUT/ablation_stores.log 2>&1
echo "ablation rc=$?"; grep -v Warn $OUT/ablation_stores.log | tail -64
timeout 150 python benchmarks/results/session29/timeline_probe.py --json $OUT/timeline_gpt2.json \
  > $OUT/timeline_gpt2.log 2>&1
echo "timeline rc=$?"; grep -v Warn $OUT/timeline_gpt2.log | tail -60
