#!/usr/bin/env bash
# The fifty-fourth session's second call: run_all.sh's training stage (the seven modes of the
# three models, four interleaved rounds, GPT-2's loss curve, the profiled steps); the report is drawn here from the files it brings back.
#   run(command="bash benchmarks/results/session54/call2.sh", carry=[".whl"], timeout_s=598)
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader
PYTHONPATH=/tmp/site bash benchmarks/run_all.sh train > "$out/run_all_train.log" 2>&1
echo "run_all train rc=$? at ${SECONDS}s"; tail -5 benchmarks/results/status.txt

cp benchmarks/results/train.json benchmarks/results/*.log benchmarks/results/status.txt "$out/" 2>/dev/null
grep -B2 -A30 "| model | mode" benchmarks/results/train.log | cut -c1-170 | head -60
