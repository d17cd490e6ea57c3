#!/usr/bin/env bash
# Twenty-second session, first device call: the Concat (q/k/v gradients read in place) on the GPU:
# its tests and the model tests it touches, then GPT-2's and BERT's training steps against
# torch.compile, profiled.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
timeout 150 python -m pytest -q -x -p no:cacheprovider tests/gpu/test_concat_gpu.py tests/gpu/test_nn_gpt.py \
  tests/gpu/test_hf_gpu.py > $OUT/gpu_tests.txt 2>&1
tail -3 $OUT/gpu_tests.txt
timeout 420 python benchmarks/train.py --models gpt2,bert --modes compile,coda+graph --profile coda+graph \
  --steps 8 --warmup 2 --curve none --timeout 200 --json $OUT/train.json > $OUT/train.log 2>&1
grep -E "tokens/s" $OUT/train.log
python benchmarks/breakdown.py $OUT/train.json --top 25
