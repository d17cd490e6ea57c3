#!/usr/bin/env bash
# Fortieth session, call 2: run_all.sh with the training stage in rounds (--steps 6 --rounds 4),
# on a fresh H200; refreshes the top-level results/*.json and docs/img/*.png.
#   run(command="bash benchmarks/results/session40/call2.sh", carry=[".whl"], timeout_s=600)
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
export PYTHONUNBUFFERED=1
bash benchmarks/run_all.sh > "${OUT:-/tmp}/run_all.log" 2>&1
echo "run_all rc=$?"; cat benchmarks/results/status.txt | tail -6
grep -E "tokens/s|round by round" "${OUT:-/tmp}/run_all.log" | head -30
cd benchmarks/results && tar czf "${OUT:-/tmp}/results.tgz" *.json *.log status.txt ../../docs/img/*.png
