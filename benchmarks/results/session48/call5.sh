#!/usr/bin/env bash
# Forty-eighth session, fifth call: the micro suite (every op fwd+bwd against the peers, replayed
# from CUDA graphs) on the current main, as run_all.sh's ops stage runs it.
#   run(command="bash benchmarks/results/session48/call5.sh", carry=[".whl"], timeout_s=330)
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src:$PYTHONPATH
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader
timeout 280 python benchmarks/micro.py --max-autotune '' --json "$out/micro.json" > "$out/micro.log" 2>&1
echo "micro rc=$? at ${SECONDS}s"; grep -iv warn "$out/micro.log" | tail -30 | cut -c1-200
