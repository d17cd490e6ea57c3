#!/usr/bin/env bash
# The fifty-second session's second call: the whole micro suite on main with Liger carried, on an
# H200 (its last H200 run was the 48th session's call 5; the norms' backward has changed since).
#   run(command="bash benchmarks/results/session52/call2.sh", carry=[".whl"], timeout_s=598)
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader
timeout 585 python benchmarks/micro.py --max-autotune '' --json "$out/micro.json" > "$out/micro.log" 2>&1
echo "micro rc=$? at ${SECONDS}s"; grep -A24 "replayed from CUDA" "$out/micro.log" | cut -c1-130
