#!/usr/bin/env bash
# Session 28, call 1: the Concat GPU tests left from the 27th; every GPT-2 GEMM beside CODA's
# plain GEMM of the same operands (coda_plain); the epilogue stage by stage at GPT-2's shapes in
# both Hopper kernels (benchmarks/ablation.py).
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $OUT/gpu.txt
timeout 100 python -m pytest -q -p no:cacheprovider tests/gpu/test_concat_gpu.py > $OUT/gpu_tests.txt 2>&1
echo "concat tests rc=$?"; tail -3 $OUT/gpu_tests.txt
timeout 200 python benchmarks/ablation.py --configs triton,pingpong \
  --shapes 16384x768x768,16384x3072x768,16384x768x3072,16384x768x2304 \
  --json $OUT/ablation.json > $OUT/ablation.log 2>&1
echo "ablation rc=$?"; cat $OUT/ablation.log | grep -v Warning | tail -150
timeout 200 python benchmarks/kernel_configs.py gpt2 --configs heuristic \
  --json $OUT/gpt2_plain.json > $OUT/gpt2_plain.log 2>&1
echo "gpt2 rc=$?"; grep "^{" $OUT/gpt2_plain.log | cut -c1-300
