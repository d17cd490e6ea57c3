#!/usr/bin/env bash
# Twenty-third session, fourth device call: every candidate configuration of four fused GEMMs
# against the heuristic's (config_probe.py), and the GPU tests of the transposed weight's gradient
# layout (GPT-2's Conv1D c_attn through layer_norm_linear).
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
timeout 330 python benchmarks/results/session23/config_probe.py > $OUT/config_probe.txt 2>&1
grep "==" $OUT/config_probe.txt; tail -3 $OUT/config_probe.txt
timeout 200 python -m pytest -q -x -p no:cacheprovider tests/gpu/test_ops_norms.py tests/gpu/test_nn_gpt.py \
  tests/gpu/test_hf_gpu.py > $OUT/gpu_tests.txt 2>&1
tail -3 $OUT/gpu_tests.txt
