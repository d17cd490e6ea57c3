#!/usr/bin/env bash
# Twenty-sixth session, last device call: a captured step keeps its step function and optimizer
# alive (the illegal address of s26_second.sh / s26_third.sh was the probes' first model freed
# under its graph): the CUDA-graph GPU tests, then GPT-2's two captures in one process again.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
D=benchmarks/results/session26
timeout 150 python -m pytest -q -p no:cacheprovider tests/gpu/test_launch_gpu.py > $OUT/gpu_tests.txt 2>&1
tail -3 $OUT/gpu_tests.txt
timeout 150 python $D/stream_probe.py gpt2 --modes=0,0 --json=$OUT/two.json > $OUT/two.log 2>&1
echo "rc=$?"; grep -E "^gpt2 |replayed|Error" $OUT/two.log | cut -c1-400
