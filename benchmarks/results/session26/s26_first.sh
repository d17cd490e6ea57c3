#!/usr/bin/env bash
# Twenty-sixth session, first device call: parameter gradients on a second stream. The GPU
# tests of it (every op's gradients with and without it, three times; CUDA-graph capture of a
# patched GPT-2 step), then the captured training steps of GPT-2, BERT and LLaMA with and
# without it, alternated in one process (stream_probe.py).
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
D=benchmarks/results/session26
[ "$1" = probe ] || { timeout 170 python -m pytest -q -n 4 -p no:cacheprovider tests/gpu/test_side_stream.py \
  tests/gpu/test_launch_gpu.py > $OUT/gpu_tests.txt 2>&1; tail -3 $OUT/gpu_tests.txt; }
timeout 340 python -X faulthandler $D/stream_probe.py gpt2 bert llama --json=$OUT/stream_probe.json > $OUT/stream_probe.log 2>&1
tail -c 3000 $OUT/stream_probe.log
