#!/usr/bin/env bash
# Twenty-fifth session, first device call: the cross-entropy's gradient map in several tiles and its
# forward with and without the target logit (ce_probe.py); every kernel of an eager CODA GPT-2
# step and what launched it (step_probe.py).
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
timeout 200 python benchmarks/results/session25/ce_probe.py > $OUT/ce_probe.txt 2>&1; cat $OUT/ce_probe.txt | cut -c1-600
timeout 250 python benchmarks/results/session25/step_probe.py gpt2 > $OUT/step_probe.txt 2>&1; tail -3 $OUT/step_probe.txt
