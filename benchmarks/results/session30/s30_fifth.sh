#!/usr/bin/env bash
# Thirtieth session, fifth call: the LM head + cross-entropy's exponential path (the forward
# stores exp(logit - c), no gradient map): its GPU tests, the head timed against the general
# path, then GPT-2's training step against torch.compile (profiled: the step's kernels).
# (Since the fourth call the forward sums E = exp(logit - c) for lse: one exponential an element.)
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
timeout 200 python -m pytest -q -n 4 -p no:cacheprovider --tb=short tests/gpu/test_ops_cross_entropy.py \
  tests/gpu/test_hf_gpu.py tests/gpu/test_nn_gpt.py > $OUT/gpu_tests.txt 2>&1
echo "gpu tests rc=$?"; grep -E "passed|failed|FAILED|Error" $OUT/gpu_tests.txt | tail -8
timeout 100 python benchmarks/results/session30/head_probe.py --json $OUT/head_probe.json > $OUT/head_probe.log 2>&1
echo "head probe rc=$?"; grep -v Warn $OUT/head_probe.log | tail -8
timeout 170 python benchmarks/train.py --models gpt2 --modes compile,coda+graph --steps 8 --warmup 2 \
  --curve none --profile coda+graph --timeout 160 --json $OUT/train_gpt2.json > $OUT/train_gpt2.log 2>&1
echo "train rc=$?"; tail -4 $OUT/train_gpt2.log
