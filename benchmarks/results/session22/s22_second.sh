#!/usr/bin/env bash
# Twenty-second session, second device call: GPT-2 and BERT training steps against torch.compile
# with the final code (GPT-2 reads q/k/v's gradients in place; BERT as before), profiled.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
timeout 100 python -m pytest -q -x -p no:cacheprovider tests/gpu/test_concat_gpu.py > $OUT/gpu_tests.txt 2>&1
tail -1 $OUT/gpu_tests.txt
timeout 420 python benchmarks/train.py --models gpt2,bert --modes compile,coda+graph --profile coda+graph \
  --steps 8 --warmup 2 --curve none --timeout 200 --json $OUT/train.json > $OUT/train.log 2>&1
grep -E "tokens/s" $OUT/train.log
python benchmarks/breakdown.py $OUT/train.json --top 0
