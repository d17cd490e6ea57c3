#!/usr/bin/env bash
# Fifty-seventh session, call 8: LLaMA-492M's CODA launches at K = 2048, the heuristic's Triton
# kernel against the ping-pong kernel's configurations (k2048_probe.py)
export PYTHONPATH=$PWD/src CODA_AUTOTUNE=0
timeout 250 python benchmarks/results/session57/k2048_probe.py --json $OUT/k2048.json 2>&1 | grep -v Warning | tee $OUT/k2048.log
