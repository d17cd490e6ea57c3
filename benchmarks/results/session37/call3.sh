#!/usr/bin/env bash
# Thirty-seventh session, call 3: the one-pass LayerNorm backward's variants (with the finishing
# sum over many narrow column blocks), the GPU tests of the norms and the models on it, then
# GPT-2 and BERT `coda+graph` on main and on the branch (variants/, carried).
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
out=${OUT:-/tmp}
PYTHONPATH=$PWD/src timeout 150 python benchmarks/results/session37/ln_grad_probe.py --json "$out/ln_grad_probe.json" > "$out/ln_grad_probe.txt" 2>&1
echo "probe rc=$?"; grep -E "two maps|fastest|WRONG|rror" "$out/ln_grad_probe.txt"
PYTHONPATH=$PWD/src timeout 150 python -m pytest -q -n 12 -p no:cacheprovider --tb=short tests/gpu/test_ops_norms.py \
  tests/gpu/test_nn_gpt.py tests/gpu/test_hf_gpu.py > "$out/gpu_tests.txt" 2>&1
echo "tests rc=$?"; grep -E "passed|failed|FAILED|Error" "$out/gpu_tests.txt" | tail -8
VARIANTS="${VARIANTS:-main ln1}" bash benchmarks/results/session35/ab.sh
