#!/usr/bin/env bash
# Twenty-third session, third device call: which ops launch the kernels outside CODA, cuBLAS,
# attention and the optimizer in a patched GPT-2's and BERT's step (copy_probe.py).
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
timeout 300 python benchmarks/results/session23/copy_probe.py > $OUT/copy_probe.txt 2>&1
cat $OUT/copy_probe.txt | head -120
