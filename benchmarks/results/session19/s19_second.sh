#!/usr/bin/env bash
# Nineteenth session, second device call: dropout's keep bits drawn under the K loop against
# drawn in the epilogue (draw_probe.py), then the GPU tests of every program through the
# ping-pong kernel and the tl_math test on the GPU.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
d=benchmarks/results/session19
timeout 300 python $d/draw_probe.py --json $OUT/draw.json 2>&1 | grep -v Warning | tee $OUT/draw.txt
timeout 200 python -m pytest -q -n 8 -p no:cacheprovider tests/gpu/test_triton_gpu.py -k "pingpong" \
  tests/codegen/test_tl_math.py 2>&1 | tee $OUT/gpu_tests_pingpong.txt | tail -4
