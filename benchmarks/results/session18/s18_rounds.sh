#!/usr/bin/env bash
# Eighteenth session, last device call: (b)'s cost with 10, 7, 4 and 0 Philox rounds.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
for r in 10 7 4 0; do timeout 100 python benchmarks/results/session18/rounds_probe.py $r 2>&1 | tail -1; done \
  | tee $OUT/rounds.txt
