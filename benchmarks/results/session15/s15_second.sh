#!/usr/bin/env bash
# Fifteenth session, second device call: LLaMA's training step with RoPE in the QKV GEMM's
# epilogue (qkv_rope(norm_weight=)), then the GPU tests (the new bf16 case, the patched BERT
# under Inductor).
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
mkdir -p $OUT/second
timeout 200 python benchmarks/train.py --models llama --modes compile,liger,coda,coda+graph --steps 8 \
  --warmup 2 --curve none --profile coda+graph --timeout 180 --json $OUT/second/train_llama.json \
  > $OUT/second/train_llama.log 2>&1
echo "train rc=$? at $SECONDS s" >> $OUT/second/train_llama.log
tail -12 $OUT/second/train_llama.log
timeout $((585 - SECONDS)) python -m pytest -q -n 8 -p no:cacheprovider tests/gpu \
  tests/integrations/test_compile_gpu.py > $OUT/second/gpu_tests.txt 2>&1
echo "gpu tests rc=$? at $SECONDS s" >> $OUT/second/gpu_tests.txt
tail -25 $OUT/second/gpu_tests.txt
cd $OUT && tar czf second.tgz second && rm -rf second
