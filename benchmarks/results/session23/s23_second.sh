#!/usr/bin/env bash
# Twenty-third session, second device call: maps that finish their own reductions (no finishing
# kernel after a map), on the GPU: the tests of the maps, norms and models they touch; BERT's
# q/k/v backward four ways (qkv_probe.py); then GPT-2's and BERT's training steps against
# torch.compile, profiled.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
timeout 60 python benchmarks/results/session23/qkv_probe.py > $OUT/qkv_probe.txt 2>&1
cat $OUT/qkv_probe.txt | tail -6
timeout 200 python -m pytest -q -x -p no:cacheprovider tests/gpu/test_ops_norms.py tests/gpu/test_concat_gpu.py \
  tests/gpu/test_nn_gpt.py tests/gpu/test_hf_gpu.py tests/gpu/test_ops_cross_entropy.py > $OUT/gpu_tests.txt 2>&1
tail -3 $OUT/gpu_tests.txt
timeout 300 python benchmarks/train.py --models gpt2,bert --modes compile,coda+graph --profile coda+graph \
  --steps 8 --warmup 2 --curve none --timeout 140 --json $OUT/train.json > $OUT/train.log 2>&1
grep -E "tokens/s" $OUT/train.log
python benchmarks/breakdown.py $OUT/train.json --top 40
