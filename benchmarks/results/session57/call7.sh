#!/usr/bin/env bash
# Fifty-seventh session, call 7: does a launch captured in a CUDA graph hang (call 3's timings)?
export PYTHONPATH=$PWD/src CODA_AUTOTUNE=0
for v in residual_rowsumsq/s4e2 swiglu_grad/s4e2x dgelu_bias_grad/s4e2 residual_rowsumsq/s4e2_nowait \
         residual_rowsumsq/s4e2x; do
    timeout 25 python benchmarks/results/session57/hang_probe.py $v --graph 2>&1 | grep -v Warning | tail -2
    echo "$v rc=${PIPESTATUS[0]}"
done 2>&1 | tee $OUT/graph_hang.log
