#!/usr/bin/env bash
# Thirtieth session, first call: the twenty-ninth session's next_session.sh as left.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
timeout 200 python -m pytest -q -n 8 -p no:cacheprovider --tb=short tests/gpu/test_triton_gpu.py \
  -k "register_stores" > $OUT/gpu_tests.txt 2>&1
echo "gpu tests rc=$?"; grep -E "passed|failed|FAILED|Error" $OUT/gpu_tests.txt | tail -8
timeout 150 python benchmarks/ablation.py --configs pingpong,pingpong_r,pingpong2_r \
  --shapes 16384x3072x768,16384x768x768 \
  --variants plain,bias_gelu,bias_save,bias_gelu_slope,bias_residual_stats,slope_colsum \
  --json $OUT/ablation_wide.json > $OUT/ablation_wide.log 2>&1
echo "ablation rc=$?"; grep -v Warn $OUT/ablation_wide.log | tail -50
