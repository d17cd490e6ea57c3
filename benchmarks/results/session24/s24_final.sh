#!/usr/bin/env bash
# Twenty-fourth session, last device call: the final code's GPU tests (cross-entropy, HF models)
# and BERT / GPT-2 in CODA + graph mode against torch.compile once more; limit_probe.py (the
# tiles of a GEMM under m_limit).
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
timeout 200 python -m pytest -q -x tests/gpu/test_ops_cross_entropy.py -k skip tests/gpu/test_hf_gpu.py \
  > $OUT/gpu_tests.txt 2>&1; tail -2 $OUT/gpu_tests.txt
timeout 90 python benchmarks/results/session24/limit_probe.py > $OUT/limit_probe.txt 2>&1; tail -3 $OUT/limit_probe.txt
timeout 250 python benchmarks/train.py --models bert,gpt2 --modes compile,coda+graph --profile none \
  --steps 8 --warmup 2 --curve none --timeout 120 --json $OUT/train.json > $OUT/train.log 2>&1
grep -E "tokens/s" $OUT/train.log
