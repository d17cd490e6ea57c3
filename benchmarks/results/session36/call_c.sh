#!/usr/bin/env bash
# Thirty-sixth session, call C (main with the balanced sums): GPT-2's two fastest modes side by side,
# 30 timed steps (run_all.sh's 8-step matrix in call B put compile+graph at 432.7k, below the
# 491.7-494.6k of the 34th and 35th sessions' own runs), then the whole GPU suite again with
# -n 12 and test names in the log (call A's ran out of its 300 s after 574 tests).
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
timeout 170 python benchmarks/train.py --models gpt2 --modes compile+graph,coda+graph --steps 30 --warmup 3 \
  --curve none --profile none --timeout 160 --json "$out/gpt2.json" > "$out/gpt2.log" 2>&1
echo "train rc=$?"; grep -E "tokens/s|rror" "$out/gpt2.log" | head -4
timeout 330 python -m pytest -v -n 12 -p no:cacheprovider --tb=short tests/gpu \
  tests/integrations/test_compile_gpu.py > "$out/gpu_tests.txt" 2>&1
echo "tests rc=$?"; grep -E "passed|failed|FAILED|Error" "$out/gpu_tests.txt" | tail -15
grep -c PASSED "$out/gpu_tests.txt"
