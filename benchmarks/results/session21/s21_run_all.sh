#!/usr/bin/env bash
# Twenty-first session, last device call: the report's one command on a freshly started H200
# (last timed in the sixteenth session: 524 s), Liger's wheel carried in .whl/. Its JSON, logs
# and plots go to $OUT (kept in session21/run_all/; the top-level results stay as the report
# cites them).
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
start=$(date +%s)
timeout 585 bash benchmarks/run_all.sh > $OUT/run_all.log 2>&1
echo "run_all.sh: rc $? in $(( $(date +%s) - start )) s"
cp benchmarks/results/*.json benchmarks/results/*.log benchmarks/results/status.txt docs/img/*.png $OUT/ 2>/dev/null
tail -12 benchmarks/results/status.txt
