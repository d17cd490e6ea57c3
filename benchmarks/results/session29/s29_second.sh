#!/usr/bin/env bash
# Twenty-ninth session, second device call, at the commit with per-warp column partials.
# 1. The whole GPU test suite (the ping-pong kernel's column sums are in every op's backward).
# 2. The column sum's cost at GPT-2's shapes (ablation: slope, slope + column sum, column sum).
# 3. Issue 8's case (e) and plain at every shape (gemm.py, rounds back to back).
# 4. GPT-2 against torch.compile alone, coda+graph profiled.
# 5. The timeline probe over three replayed steps (idle between steps: host or clocks?).
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
timeout 280 python -m pytest -q -n 8 -p no:cacheprovider --tb=short tests/gpu > $OUT/gpu_tests.txt 2>&1
echo "gpu tests rc=$?"; grep -E "passed|failed|FAILED|Error" $OUT/gpu_tests.txt | tail -8
timeout 120 python benchmarks/ablation.py --shapes 16384x3072x768,16384x768x768 \
  --variants plain,slope,slope_colsum,colsum --json $OUT/ablation_colsum.json > $OUT/ablation_colsum.log 2>&1
echo "ablation rc=$?"; grep -v Warn $OUT/ablation_colsum.log | tail -10
timeout 200 python benchmarks/train.py --models gpt2 --modes compile,coda+graph --steps 8 --warmup 2 \
  --curve none --profile coda+graph --timeout 180 --json $OUT/train_gpt2.json > $OUT/train_gpt2.log 2>&1
echo "train rc=$?"; tail -4 $OUT/train_gpt2.log
timeout 150 python benchmarks/gemm.py --cases plain,dgelu_bias_grad --rounds 5 --no-compile \
  --json $OUT/gemm_e.json > $OUT/gemm_e.log 2>&1
echo "gemm rc=$?"; grep -v Warn $OUT/gemm_e.log | tail -30
timeout 150 python benchmarks/results/session29/timeline_probe.py --json $OUT/timeline_gpt2.json \
  > $OUT/timeline_gpt2.log 2>&1
echo "timeline rc=$?"; grep -v Warn $OUT/timeline_gpt2.log | grep -v "^gap\|^idle after" | tail -8
