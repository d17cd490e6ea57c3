#!/usr/bin/env bash
# Twenty-fourth session, first device call: the GPU tests of the limits (through the cross-entropy's
# skip_ignored) and of the models, the skip probe, and BERT / GPT-2 against torch.compile, profiled.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
timeout 200 python -m pytest -q -x tests/gpu/test_ops_cross_entropy.py -k "skip or bf16" tests/gpu/test_hf_gpu.py \
  > $OUT/gpu_tests.txt 2>&1; tail -5 $OUT/gpu_tests.txt
timeout 120 python benchmarks/results/session24/skip_probe.py > $OUT/skip_probe.txt 2>&1; tail -4 $OUT/skip_probe.txt
timeout 250 python benchmarks/train.py --models bert,gpt2 --modes compile,coda+graph --profile coda+graph \
  --steps 8 --warmup 2 --curve none --timeout 120 --json $OUT/train.json > $OUT/train.log 2>&1
grep -E "tokens/s" $OUT/train.log
python benchmarks/breakdown.py $OUT/train.json --top 25
