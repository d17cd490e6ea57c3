#!/usr/bin/env bash
# Twenty-first session, last device call (the session's budget left ~190 s of command): bias
# gradients from the norm's dx map (common.bias_grad). The GPU tests it touches, then GPT-2's and
# BERT's CODA + graph steps, to compare with this session's first call (GPT-2 554.9k, BERT 618.4k).
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
timeout 70 python -m pytest -q -n 8 -p no:cacheprovider tests/gpu/test_ops_norms.py tests/gpu/test_hf_gpu.py \
  -k "not llama" 2>&1 | tee $OUT/gpu_tests.txt | tail -3
timeout 110 python benchmarks/train.py --models gpt2,bert --modes coda+graph --profile coda+graph --steps 8 \
  --warmup 2 --curve none --timeout 100 --json $OUT/train.json > $OUT/train.log 2>&1
grep -E "tokens/s" $OUT/train.log
