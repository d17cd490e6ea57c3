#!/usr/bin/env bash
# Twenty-seventh session, call 4: the final code (Concat along K takes the ping-pong kernel).
# The GPU tests (8 workers), then GPT-2 against torch.compile (train.py, coda+graph profiled).
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
timeout 250 python -m pytest -q -n 8 -p no:cacheprovider --tb=short tests/gpu > $OUT/gpu_tests.txt 2>&1
echo "gpu tests rc=$?"; grep -E "passed|failed|FAILED|Error" $OUT/gpu_tests.txt | tail -8
timeout 260 python benchmarks/train.py --models gpt2 --modes compile,coda+graph --steps 8 --warmup 2 \
  --curve none --profile coda+graph --timeout 220 --json $OUT/train_gpt2.json > $OUT/train_gpt2.log 2>&1
echo "train rc=$?"; tail -8 $OUT/train_gpt2.log
