#!/usr/bin/env bash
# Left by the thirty-seventh session for the next one's first device call: the whole benchmark
# set with LayerNorm's backward in one pass (the top-level results/*.json and docs/img/*.png are
# still the thirty-sixth session's), as one command. 461 s on a warm machine in the thirty-sixth
# session, 543 s fresh without compile+graph in the thirty-first: give the call its full 600 s.
#   run(command="bash benchmarks/results/session37/next_session.sh", carry=[".whl"], timeout_s=600)
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
export PYTHONUNBUFFERED=1
bash benchmarks/run_all.sh > "${OUT:-/tmp}/run_all.log" 2>&1
echo "run_all rc=$?"; cat benchmarks/results/status.txt; grep -E "tokens/s" "${OUT:-/tmp}/run_all.log" | head -20
cd benchmarks/results && tar czf "${OUT:-/tmp}/results.tgz" *.json *.log status.txt ../../docs/img/*.png
