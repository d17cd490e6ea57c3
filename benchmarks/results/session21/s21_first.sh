#!/usr/bin/env bash
# Twenty-first session, first device call: the probes the twentieth left, and PDL's gap.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv | tee $OUT/gpu.txt
timeout 120 python benchmarks/results/session21/pdl_probe.py --json $OUT/pdl_probe.json 2>&1 | tee $OUT/pdl_probe.log
timeout 300 python benchmarks/results/session20/ln_probe.py --json $OUT/ln_probe.json 2>&1 | tee $OUT/ln_probe.log | tail -30
timeout 120 python benchmarks/results/session20/dw_probe.py --json $OUT/dw_probe.json 2>&1 | tee $OUT/dw_probe.log
