#!/usr/bin/env bash
# Thirty-first session, third call (carry .whl): the cross-entropy GPU tests, every kernel of GPT-2's head, then the report's
# one command on main with exp-ftz merged (GPT-2's 200-step loss curve with the exponential path
# among it), its outputs back as run_all.tar.gz; then, if time is left, step_kernels.py.   bash benchmarks/results/session31/third.sh
out=${OUT:-/tmp}; start=$(date +%s)
PYTHONPATH=$PWD/src CODA_AUTOTUNE=0 timeout 100 python -m pytest -q -n 4 -p no:cacheprovider --tb=short \
  tests/gpu/test_ops_cross_entropy.py > "$out/gpu_tests_ce.txt" 2>&1
echo "cross-entropy GPU tests rc=$?"; grep -E "passed|failed|FAILED|Error" "$out/gpu_tests_ce.txt" | tail -6
PYTHONPATH=$PWD/src CODA_AUTOTUNE=0 timeout 90 python benchmarks/results/session31/head_profile.py \
  --json "$out/head_profile.json" > "$out/head_profile.log" 2>&1
echo "head profile rc=$?"; grep -v Warn "$out/head_profile.log" | tail -30
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
PYTHONPATH=/tmp/site timeout $(( 580 - $(date +%s) + start )) bash benchmarks/run_all.sh > "$out/run_all.log" 2>&1
echo "run_all.sh: rc $? at $(( $(date +%s) - start )) s"
tar czf "$out/run_all.tar.gz" benchmarks/results/*.json benchmarks/results/*.log benchmarks/results/status.txt \
  docs/img/*.png 2>/dev/null
tail -8 benchmarks/results/status.txt
left=$(( 590 - $(date +%s) + start ))
if [ $left -gt 40 ]; then
  PYTHONPATH=$PWD/src CODA_AUTOTUNE=0 timeout $left python benchmarks/results/session31/step_kernels.py \
    > "$out/step_kernels.log" 2>&1
  echo "step kernels rc=$?"; grep -v Warn "$out/step_kernels.log" | head -60
fi
