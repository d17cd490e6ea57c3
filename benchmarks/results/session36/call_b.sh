#!/usr/bin/env bash
# Thirty-sixth session, call B: the one command (benchmarks/run_all.sh) on main after the balanced
# sums were merged, with the training matrix's compile+graph mode (never run by this script before).
# Its stages' limits add up to 595 s; the call's limit is 600, so the script is stopped at 570 s if
# still running, and whatever it wrote by then (JSON, logs, plots) comes back in one archive.
out=${OUT:-/tmp}
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
touch /tmp/began
began=$SECONDS
bash benchmarks/run_all.sh > "$out/run_all.out" 2>&1 &
pid=$!
while kill -0 $pid 2> /dev/null && (( SECONDS - began < 570 )); do sleep 2; done
kill -0 $pid 2> /dev/null && { echo "stopped at $((SECONDS - began)) s"; pkill -P $pid; kill $pid; sleep 2; }
echo "run_all.sh: $((SECONDS - began)) s"
find benchmarks/results docs/img -maxdepth 1 -type f -newer /tmp/began | tar czf "$out/results.tgz" -T -
tar tzf "$out/results.tgz"; tail -5 benchmarks/results/status.txt
