#!/usr/bin/env bash
# Twenty-sixth session, last call: the ping-pong kernel's one TMA output in two buffers a
# warpgroup. GPU tests of the ping-pong programs (bf16), of every candidate configuration and of
# the cross-entropy; then staging_probe.py (one buffer against two, alternated).
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
D=benchmarks/results/session26
timeout 110 python -m pytest -q -x -n 8 -p no:cacheprovider tests/gpu/test_triton_gpu.py \
  -k "(pingpong and not loads and bfloat16) or every_candidate or falls_back or cross_entropy" \
  tests/gpu/test_ops_cross_entropy.py > $OUT/gpu_tests.txt 2>&1; tail -2 $OUT/gpu_tests.txt
timeout 120 python $D/staging_probe.py 2>&1 | tail -6
