#!/usr/bin/env bash
# Thirtieth session, second call: gelu and gelu_grad in 10 float32 instructions an element (was 11):
# their GPU tests and the ablation against the old form written out in the DSL; GPT-2's ln_1 +
# q/k/v projection folded (what the HF patch runs) against the norm's maps + plain GEMMs.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
timeout 200 python -m pytest -q -n 8 -p no:cacheprovider --tb=short tests/gpu -k "gelu" \
  > $OUT/gpu_tests.txt 2>&1
echo "gpu tests rc=$?"; grep -E "passed|failed|FAILED|Error" $OUT/gpu_tests.txt | tail -8
timeout 120 python benchmarks/results/session30/ln_split_probe.py --json $OUT/ln_split.json \
  > $OUT/ln_split.log 2>&1
echo "ln probe rc=$?"; grep -v Warn $OUT/ln_split.log | tail -12
timeout 150 python benchmarks/ablation.py --shapes 16384x3072x768,16384x768x768 \
  --variants plain,bias_gelu,bias_gelu_slope,bias_gelu_slope_11,bias_gelu_slope,bias_gelu_slope_11 \
  --json $OUT/ablation_gelu.json > $OUT/ablation_gelu.log 2>&1
echo "ablation rc=$?"; grep -v Warn $OUT/ablation_gelu.log | tail -16
