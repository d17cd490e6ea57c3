#!/usr/bin/env bash
# Forty-second session, call 2: the session-41 patches (column sums on the tensor cores) with
# the 32-column-slice fix: which GPU tests fail (names), issue 8's (e) against its plain GEMM,
# and GPT-2's ln_1 dy @ w and out-projection dx with and without the sums (sums_probe.py).
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
timeout 330 python -m pytest -q -n 14 -rf -p no:cacheprovider tests/gpu/test_triton_gpu.py tests/gpu/test_concat_gpu.py \
    tests/gpu/test_ops_linear.py tests/gpu/test_ops_norms.py tests/gpu/test_ops_gated.py tests/gpu/test_hf_gpu.py \
    tests/gpu/test_nn_gpt.py > "$out/gpu_tests.log" 2>&1
echo "tests rc=$?"; grep -E "^FAILED|passed|failed" "$out/gpu_tests.log" | cut -c1-250 | head -20
timeout 90 python benchmarks/gemm.py --no-compile --rounds 3 --cases plain,dgelu_bias_grad \
    --shapes 16384x3072x768,16384x768x3072,4096x4096x4096,8192x4096x11008 --json "$out/gemm_e.json" \
    > "$out/gemm_e.log" 2>&1
echo "gemm rc=$?"; grep -iE "dgelu|ratio|Error" "$out/gemm_e.log" | cut -c1-200 | head -12
timeout 100 python benchmarks/results/session41/sums_probe.py > "$out/sums_probe.log" 2>&1
echo "probe rc=$?"; cut -c1-60 "$out/sums_probe.log" | grep -E "sums=|cuBLAS|x768|rror"
