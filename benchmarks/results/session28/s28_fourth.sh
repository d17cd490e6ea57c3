#!/usr/bin/env bash
# Session 28, call 4: coda.ops.embedding (GPU test, timing against PyTorch's backward), no zero
# gradients for the row sums, carried row sums; GPU tests of the changed ops; GPT-2 against
# torch.compile (coda+graph profiled); GPT-2's attention in each SDPA backend.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
timeout 200 python -m pytest -q -n 8 -p no:cacheprovider --tb=short tests/gpu/test_ops_embedding.py \
  tests/gpu/test_hf_gpu.py tests/gpu/test_ops_linear.py tests/gpu/test_ops_norms.py tests/gpu/test_nn_gpt.py \
  > $OUT/gpu_tests.txt 2>&1
echo "gpu tests rc=$?"; grep -E "passed|failed|FAILED|Error" $OUT/gpu_tests.txt | tail -8
timeout 60 python benchmarks/results/session28/embedding_probe.py > $OUT/embedding_probe.txt 2>&1
echo "probe rc=$?"; tail -3 $OUT/embedding_probe.txt
timeout 60 python benchmarks/results/session28/attention_probe.py > $OUT/attention_probe.txt 2>&1
echo "attention rc=$?"; tail -3 $OUT/attention_probe.txt
timeout 240 python benchmarks/train.py --models gpt2 --modes compile,coda+graph --steps 8 --warmup 2 \
  --curve none --profile coda+graph --timeout 200 --json $OUT/train_gpt2.json > $OUT/train_gpt2.log 2>&1
echo "train rc=$?"; tail -4 $OUT/train_gpt2.log
