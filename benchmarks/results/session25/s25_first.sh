#!/usr/bin/env bash
# Twenty-fifth session, first device call: the cross-entropy's GPU tests (its target logit now a
# gather-dot); its gradient map in several tiles and its forward with and without the target
# logit in the epilogue (ce_probe.py); every kernel of an eager CODA GPT-2 step and what launched
# it (step_probe.py); where the host time of the GPT-2-size ops goes (host_probe.py).
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
R=$OUT/r; mkdir -p $R; export OUT=$R
timeout 240 python -m pytest -q -x tests/gpu/test_ops_cross_entropy.py > $R/gpu_tests.txt 2>&1; tail -2 $R/gpu_tests.txt
timeout 200 python benchmarks/results/session25/ce_probe.py > $R/ce_probe.txt 2>&1; cut -c1-700 $R/ce_probe.txt
timeout 120 python benchmarks/results/session25/host_probe.py > $R/host_probe.txt 2>&1; cat $R/host_probe.txt
timeout 200 python benchmarks/results/session25/step_probe.py gpt2 > $R/step_probe.txt 2>&1; head -45 $R/step_probe.txt
cd $R/.. && tar czf first.tgz r && rm -rf r
