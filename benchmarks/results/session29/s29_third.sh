#!/usr/bin/env bash
# Twenty-ninth session, third device call, at the commit wiring coda.ops.column_sum_kernel:
# 1. the column-sum probe (SUMS map, torch.sum, the kernel in several shapes);
# 2. the ping-pong kernel's outputs stored from registers in 16-byte pieces (pingpong_r,
#    pingpong2_r) beside the staged stores, at fc1's shape;
# 3. the GPU tests of the ops with bias gradients and of the HF models;
# 4. GPT-2 against torch.compile alone, coda+graph profiled.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
timeout 100 python benchmarks/results/session29/column_sum_probe.py > $OUT/column_sum_probe.txt 2>&1
echo "probe rc=$?"; grep -v Warn $OUT/column_sum_probe.txt | tail -45
timeout 90 python benchmarks/ablation.py --configs pingpong,pingpong_r,pingpong2_r --shapes 16384x3072x768 \
  --variants plain,bias_gelu_slope,bias_residual_stats --json $OUT/ablation_wide.json > $OUT/ablation_wide.log 2>&1
echo "ablation rc=$?"; grep -v Warn $OUT/ablation_wide.log | tail -13
timeout 150 python -m pytest -q -n 8 -p no:cacheprovider --tb=short tests/gpu/test_ops_linear.py \
  tests/gpu/test_ops_norms.py tests/gpu/test_concat_gpu.py tests/gpu/test_hf_gpu.py > $OUT/gpu_tests.txt 2>&1
echo "gpu tests rc=$?"; grep -E "passed|failed|FAILED|Error" $OUT/gpu_tests.txt | tail -8
timeout 170 python benchmarks/train.py --models gpt2 --modes compile,coda+graph --steps 8 --warmup 2 \
  --curve none --profile coda+graph --timeout 160 --json $OUT/train_gpt2.json > $OUT/train_gpt2.log 2>&1
echo "train rc=$?"; tail -4 $OUT/train_gpt2.log
