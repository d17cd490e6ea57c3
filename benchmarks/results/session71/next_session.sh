#!/usr/bin/env bash
# For the next session's first call: the GPU tests the seventy-first session's last build did not
# run (cross-entropy, linear, gated, nn: 31 tests, round_bf16 in the cross-entropy's epilogue
# among them), then on an H200 session70/next_session.sh (GPT-2 against compile+graph, issue
# 8's table), elsewhere the HF GPU tests.
#   run(command="cd .snap && bash benchmarks/results/session71/next_session.sh", kind="nvidia-h200",
#       carry=[".snap"], timeout_s=595)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
timeout 200 python -m pytest -v -n 8 -p no:cacheprovider --tb=short tests/gpu/test_ops_cross_entropy.py \
    tests/gpu/test_ops_linear.py tests/gpu/test_ops_gated.py tests/gpu/test_nn_gpt.py > "$out/ops_tests.log" 2>&1
echo "ops tests rc=$? at ${SECONDS}s: $(grep -c PASSED "$out/ops_tests.log") passed, $(grep -c FAILED "$out/ops_tests.log") failed"
grep -E "FAILED|^E |passed|failed" "$out/ops_tests.log" | tail -12
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
    OUT=$out LIMIT=$((580 - SECONDS)) bash benchmarks/results/session70/next_session.sh
else
    timeout $((585 - SECONDS)) python -m pytest -v -n 4 -p no:cacheprovider --tb=short \
        tests/gpu/test_hf_gpu.py > "$out/hf_tests.log" 2>&1
    echo "hf tests rc=$? at ${SECONDS}s: $(grep -c PASSED "$out/hf_tests.log") passed"
fi
