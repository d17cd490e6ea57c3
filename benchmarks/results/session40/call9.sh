#!/usr/bin/env bash
# Fortieth session, call 9: the one-pass LayerNorm forward in its own configuration (forward_config)
# against the maps without given sums, and the GPU tests of the norms and models on the final code.
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
timeout 60 python benchmarks/results/session40/ln_forward_configs.py 2>&1 | grep -v Warn > "$out/ln_forward.log"
head -3 "$out/ln_forward.log"
timeout 100 python -m pytest -q -x -n 8 -p no:cacheprovider tests/gpu/test_ops_norms.py tests/gpu/test_hf_gpu.py \
    tests/gpu/test_nn_gpt.py > "$out/gpu_tests.log" 2>&1
echo "tests rc=$?"; tail -2 "$out/gpu_tests.log"
