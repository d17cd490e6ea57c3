#!/usr/bin/env bash
# Session 28, call 3: row sums carried from block to block (GPT-2, LLaMA) and GPT-2's ln_f as a
# CODA LayerNorm. The HF-model GPU tests, then GPT-2 against torch.compile (coda+graph
# profiled), then LLaMA's coda+graph alone (profiled).
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
timeout 150 python -m pytest -q -n 8 -p no:cacheprovider --tb=short tests/gpu/test_hf_gpu.py \
  tests/gpu/test_nn_gpt.py > $OUT/gpu_tests.txt 2>&1
echo "gpu tests rc=$?"; grep -E "passed|failed|FAILED|Error" $OUT/gpu_tests.txt | tail -8
timeout 240 python benchmarks/train.py --models gpt2 --modes compile,coda+graph --steps 8 --warmup 2 \
  --curve none --profile coda+graph --timeout 200 --json $OUT/train_gpt2.json > $OUT/train_gpt2.log 2>&1
echo "train rc=$?"; tail -4 $OUT/train_gpt2.log
timeout 180 python benchmarks/train.py --models llama --modes coda+graph --steps 8 --warmup 2 \
  --curve none --profile coda+graph --timeout 160 --json $OUT/train_llama.json > $OUT/train_llama.log 2>&1
echo "llama rc=$?"; tail -3 $OUT/train_llama.log
