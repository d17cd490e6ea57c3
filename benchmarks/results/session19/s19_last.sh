#!/usr/bin/env bash
# Nineteenth session, last device call: the GPU tests of the cross-entropy and the HF models
# (their heads run on it) with 2**29-logit blocks, then GPT-2, LLaMA and BERT training steps,
# torch.compile against CODA + graph (the best peer and CODA's best mode in session 18).
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
timeout 150 python -m pytest -q -n 8 -p no:cacheprovider tests/gpu/test_ops_cross_entropy.py \
  tests/gpu/test_hf_gpu.py 2>&1 | tee $OUT/gpu_tests.txt | tail -3
timeout 290 python benchmarks/train.py --models gpt2,llama+bert --modes compile,coda+graph \
    --steps 8 --warmup 2 --curve none --timeout 200 --json $OUT/train.json > $OUT/train.log 2>&1
echo "train rc=$?" >> $OUT/train.log
grep -E "rc=|tokens/s" $OUT/train.log | tail -12
