#!/usr/bin/env bash
# Twenty-ninth session, second device call, at the commit with per-warp column partials.
# 1. The whole GPU test suite (the ping-pong kernel's column sums are in every op's backward).
# 2. The column sum's cost at GPT-2's shapes (ablation: slope, slope + column sum, column sum).
# 3. The timeline probe over three replayed steps (idle between steps: host or clocks?).
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
timeout 250 python -m pytest -q -n 8 -p no:cacheprovider --tb=short tests/gpu > $OUT/gpu_tests.txt 2>&1
echo "gpu tests rc=$?"; grep -E "passed|failed|FAILED|Error" $OUT/gpu_tests.txt | tail -8
timeout 90 python benchmarks/ablation.py --shapes 16384x3072x768,16384x768x768 \
  --variants plain,slope,slope_colsum,colsum --json $OUT/ablation_colsum.json > $OUT/ablation_colsum.log 2>&1
echo "ablation rc=$?"; grep -v Warn $OUT/ablation_colsum.log | tail -10
timeout 120 python benchmarks/results/session29/timeline_probe.py --json $OUT/timeline_gpt2.json \
  > $OUT/timeline_gpt2.log 2>&1
echo "timeline rc=$?"; grep -v Warn $OUT/timeline_gpt2.log | grep -v "^gap\|^idle after" | tail -8
