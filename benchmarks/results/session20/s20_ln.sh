#!/usr/bin/env bash
# Twentieth session, sixth GPU call: coda.nn.layer_norm's backward in one pass (row_grad_kernel):
# its bf16 GPU tests and the BERT model's (which runs it 25 times a step), then BERT's training
# step with CODA + graph, profiled (against this session's torch.compile rows: last/train.json).
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
timeout 60 python -m pytest -q -n 8 -p no:cacheprovider "tests/gpu/test_ops_norms.py" -k "layer_norm_bf16" \
  2>&1 | tee $OUT/gpu_tests.txt | tail -1
timeout 70 python benchmarks/train.py --models bert --modes coda+graph --profile coda+graph \
  --steps 8 --warmup 2 --curve none --timeout 65 --json $OUT/train.json > $OUT/train.log 2>&1
grep -E "tokens/s" $OUT/train.log
timeout 60 python -m pytest -q -n 8 -p no:cacheprovider \
  "tests/gpu/test_hf_gpu.py::test_patched_model_bf16_within_eager_error[bert]" 2>&1 | tee -a $OUT/gpu_tests.txt | tail -1
