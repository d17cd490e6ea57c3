#!/usr/bin/env bash
# Twenty-sixth session: after two captures in one process replayed into an illegal address
# (s26_first.sh), one capture a process: GPT-2 with the side stream, without it, and (which of
# the two is at fault) two captures without it.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
D=benchmarks/results/session26
for modes in graph 0 0,0; do
  timeout 120 python $D/stream_probe.py gpt2 --modes=$modes --json=$OUT/probe_gpt2_${modes/,/_}.json \
    > $OUT/probe_gpt2_${modes/,/_}.log 2>&1
  echo "== $modes rc=$?"; grep -E "^gpt2|Error|error" $OUT/probe_gpt2_${modes/,/_}.log | cut -c1-600
done
