#!/usr/bin/env bash
# Thirty-first session, third call (carry .whl): the report's one command on main with exp-ftz
# merged (GPT-2's 200-step loss curve with the exponential path among it), then every kernel of
# GPT-2's head.   bash benchmarks/results/session31/third.sh
out=${OUT:-/tmp}
bash benchmarks/results/session30/next_session.sh run_all
PYTHONPATH=$PWD/src CODA_AUTOTUNE=0 timeout 90 python benchmarks/results/session31/head_profile.py \
  --json "$out/head_profile.json" > "$out/head_profile.log" 2>&1
echo "head profile rc=$?"; grep -v Warn "$out/head_profile.log" | tail -40
