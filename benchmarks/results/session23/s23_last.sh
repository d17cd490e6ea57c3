#!/usr/bin/env bash
# Twenty-third session, eighth device call: the q/k/v bias gradients as one map over the Concat
# of their gradients. GPU tests of the Concat and GPT-2 paths, then GPT-2's step against
# torch.compile, profiled.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
timeout 80 python -m pytest -q -x -p no:cacheprovider tests/gpu/test_concat_gpu.py tests/gpu/test_nn_gpt.py \
  > $OUT/gpu_tests.txt 2>&1
tail -2 $OUT/gpu_tests.txt
timeout 125 python benchmarks/train.py --models gpt2 --modes compile,coda+graph --profile coda+graph \
  --steps 8 --warmup 2 --curve none --timeout 120 --json $OUT/train.json > $OUT/train.log 2>&1
grep -E "tokens/s" $OUT/train.log
python benchmarks/breakdown.py $OUT/train.json --top 30
