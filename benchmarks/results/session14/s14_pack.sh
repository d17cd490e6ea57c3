#!/usr/bin/env bash
# Fourteenth session, second device call: the gated MLP's backward on `pack` (dx and dw_gate_up
# one GEMM each): its GPU tests, its kernels timed, and LLaMA's training rows.
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
timeout 200 python -m pytest -q -n 8 -p no:cacheprovider tests/gpu/test_ops_gated.py tests/gpu/test_hf_gpu.py \
  "tests/gpu/test_triton_gpu.py::test_error_within_twice_eager" -k "pack or gated or swiglu or llama or geglu" \
  > $OUT/gpu_tests.txt 2>&1
echo "gpu tests rc=$? at $SECONDS s" >> $OUT/gpu_tests.txt
tail -4 $OUT/gpu_tests.txt
timeout 120 python benchmarks/kernel_configs.py llama --cases swiglu_grad,gated_dx,plain_dw_gate_up \
  --json $OUT/llama_configs.json > $OUT/llama_configs.log 2>&1
echo "kernel_configs rc=$? at $SECONDS s" >> $OUT/llama_configs.log
cat $OUT/llama_configs.log
timeout $((590 - SECONDS)) python benchmarks/train.py --models llama --modes compile,liger,coda,coda+graph \
  --steps 8 --warmup 2 --curve none --profile coda+graph --timeout 240 --json $OUT/train_llama.json \
  > $OUT/train_llama.log 2>&1
echo "train rc=$? at $SECONDS s" >> $OUT/train_llama.log
tail -12 $OUT/train_llama.log
