#!/usr/bin/env bash
# Session 28, call 7: the embedding kernel's GPU test in its final shape, then GPT-2 against
# torch.compile alone (the status table's comparison), coda+graph profiled.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
timeout 60 python -m pytest -q -p no:cacheprovider --tb=short tests/gpu/test_ops_embedding.py > $OUT/gpu_tests.txt 2>&1
echo "gpu tests rc=$?"; grep -E "passed|failed|FAILED|Error" $OUT/gpu_tests.txt | tail -4
timeout 200 python benchmarks/train.py --models gpt2 --modes compile,coda+graph --steps 8 --warmup 2 \
  --curve none --profile coda+graph --timeout 180 --json $OUT/train_gpt2.json > $OUT/train_gpt2.log 2>&1
echo "train rc=$?"; tail -4 $OUT/train_gpt2.log
