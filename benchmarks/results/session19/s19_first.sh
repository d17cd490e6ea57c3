#!/usr/bin/env bash
# Nineteenth session, first device call: the ping-pong epilogue looped over its slices against
# unrolled (loop_probe.py), then the GPU tests of every program through the ping-pong kernel.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
d=benchmarks/results/session19
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv | tee $OUT/gpu.txt
timeout 330 python $d/loop_probe.py --json $OUT/loop.json 2>&1 | grep -v Warning | tee $OUT/loop.txt
timeout 230 python -m pytest -q -n 8 -p no:cacheprovider tests/gpu/test_triton_gpu.py -k pingpong 2>&1 \
  | tee $OUT/gpu_tests_pingpong.txt | tail -4
