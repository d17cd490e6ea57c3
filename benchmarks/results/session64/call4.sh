#!/usr/bin/env bash
# Sixty-fourth session, call 4: on an H200 the fifty-ninth session's prepared run (GPT-2 against
# compile+graph, issue 8's table). Elsewhere: call 3 (cuBLASLt's algorithms' configurations),
# then the GPU tests of the kernels this session's fixes touch (constants folded to inf/NaN,
# row_logsumexp of +inf, dropout's probability clamped), natively on the GPU.
#   run(command="bash benchmarks/results/session64/call4.sh", timeout_s=598)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader)
case "$gpu" in *H200*) exec bash benchmarks/results/session59/next_h200.sh ;; esac
bash benchmarks/results/session64/call3.sh
timeout 400 python -m pytest -v -n 4 -p no:cacheprovider --tb=short \
    tests/runtime/test_binding.py tests/gpu/test_launch_gpu.py tests/gpu/test_triton_gpu.py \
    -k "not error_within_twice_eager or swiglu_dropout" > "$out/gpu_tests.log" 2>&1
echo "tests rc=$? at ${SECONDS}s: $(grep -c PASSED "$out/gpu_tests.log") passed"
grep -E "FAILED|^E |passed|failed" "$out/gpu_tests.log" | tail -20
