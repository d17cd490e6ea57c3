#!/usr/bin/env bash
# Fifty-seventh session, call 4: which variant of call 3 hangs (each in a process of its own)
export PYTHONPATH=$PWD/src CODA_AUTOTUNE=0
for v in residual_rowsumsq/s4e2x dgelu_bias_grad/s4e2x residual_rowsumsq/s5e2x swiglu_grad/s4e2x \
         residual_rowsumsq/s4e2 dgelu_bias_grad/s4e2 residual_rowsumsq/s4e2_nowait \
         residual_rowsumsq/s4e2_nofetch swiglu_grad/s4e2x_nowait; do
    timeout 28 python benchmarks/results/session57/hang_probe.py $v 2>&1 | grep -v Warning | tail -2
    echo "$v rc=${PIPESTATUS[0]}"
done 2>&1 | tee $OUT/hang.log
