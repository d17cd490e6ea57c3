#!/usr/bin/env bash
# Left for the next device session (twenty-eighth session's closing note): one call.
# 1. What GELU's cost in the ping-pong epilogue is made of (it moves no shared-memory bytes yet
#    costs 0.35-0.43 us a tile): a few FMAs alone, one tanh alone, beside plain / bias / GELU.
# 2. The GPU test suite on the final code (this session ran the changed ops' and models' tests).
# (run_all.sh on a freshly started machine, this session's ran warm, needs a call of its own.)
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
timeout 120 python benchmarks/ablation.py --configs pingpong --shapes 16384x3072x768,16384x768x2304 \
  --variants plain,bias,bias_fma4,bias_tanh,bias_gelu --json $OUT/ablation_math.json > $OUT/ablation_math.log 2>&1
echo "ablation rc=$?"; grep -v Warn $OUT/ablation_math.log | tail -24
timeout 250 python -m pytest -q -n 8 -p no:cacheprovider --tb=short tests/gpu > $OUT/gpu_tests.txt 2>&1
echo "gpu tests rc=$?"; grep -E "passed|failed|FAILED|Error" $OUT/gpu_tests.txt | tail -8
