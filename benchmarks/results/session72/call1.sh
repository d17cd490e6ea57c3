#!/usr/bin/env bash
# Seventy-second session, first call: the GPU tests the seventy-first session's last build did not
# run (cross-entropy, linear, gated, nn) and the generated kernels' tests on the GPU (this
# session's signed-zero codegen: neg as x * -1, a -0.0 constant), then on an H200 the issue 6/8
# readings (session70/next_session.sh), elsewhere the HF GPU tests.
#   run(command="cd .snap && bash benchmarks/results/session72/call1.sh", carry=[".snap"], timeout_s=595)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee "$out/gpu.txt"
timeout 240 python -m pytest -v -n 8 -p no:cacheprovider --tb=short tests/gpu/test_ops_cross_entropy.py \
    tests/gpu/test_ops_linear.py tests/gpu/test_ops_gated.py tests/gpu/test_nn_gpt.py \
    tests/codegen/test_interpreter.py > "$out/ops_tests.log" 2>&1
echo "ops tests rc=$? at ${SECONDS}s: $(grep -c PASSED "$out/ops_tests.log") passed, $(grep -c FAILED "$out/ops_tests.log") failed"
grep -E "FAILED|^E |passed|failed" "$out/ops_tests.log" | tail -12
if grep -q H200 "$out/gpu.txt"; then
    OUT=$out LIMIT=$((580 - SECONDS)) bash benchmarks/results/session70/next_session.sh
else
    timeout $((585 - SECONDS)) python -m pytest -v -n 4 -p no:cacheprovider --tb=short \
        tests/gpu/test_hf_gpu.py > "$out/hf_tests.log" 2>&1
    echo "hf tests rc=$? at ${SECONDS}s: $(grep -c PASSED "$out/hf_tests.log") passed"
    grep -E "FAILED|^E " "$out/hf_tests.log" | head -8
fi
