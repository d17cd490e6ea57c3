#!/usr/bin/env bash
# Fortieth session, call 5: layer_norm_linear's one-pass backward against the map form
# (ln_linear_probe.py: numerics, the op from CUDA graphs, GPT-2's captured step A/B), then the
# GPU tests of the ops and models it touches.
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
timeout 330 python benchmarks/results/session40/ln_linear_probe.py > "$out/ln_linear_probe.log" 2>&1
echo "probe rc=$?"; grep -v Warning "$out/ln_linear_probe.log" | tail -40
timeout 200 python -m pytest -q -x -n 8 -p no:cacheprovider tests/gpu/test_ops_norms.py tests/gpu/test_concat_gpu.py \
    tests/gpu/test_hf_gpu.py tests/gpu/test_nn_gpt.py > "$out/gpu_tests.log" 2>&1
echo "tests rc=$?"; tail -5 "$out/gpu_tests.log"
