#!/usr/bin/env bash
# Fourteenth session, fourth device call: the GPU tests touched by the packed programs' 128x128
# default; then where a CODA-patched BERT's torch.compile warm-up goes (cc_diag.py, outer frames)
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
timeout 150 python -m pytest -q -n 8 -p no:cacheprovider tests/gpu/test_ops_gated.py tests/gpu/test_hf_gpu.py \
  "tests/gpu/test_triton_gpu.py::test_error_within_twice_eager" -k "pack or swiglu or llama or geglu" \
  > $OUT/gpu_tests.txt 2>&1
echo "gpu tests rc=$? at $SECONDS s" >> $OUT/gpu_tests.txt
tail -3 $OUT/gpu_tests.txt
TORCH_LOGS=recompiles,graph_breaks timeout $((330 - SECONDS)) python benchmarks/results/session14/cc_diag.py bert \
  > $OUT/cc_diag.log 2>&1
echo "cc_diag rc=$? at $SECONDS s" >> $OUT/cc_diag.log
tail -c 6000 $OUT/cc_diag.log
