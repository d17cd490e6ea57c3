#!/usr/bin/env bash
# Seventieth session, call 2: the whole GPU suite on this session's build (the sixty-ninth
# session's gated-MLP float16 path and Gemma, the seventieth's final-norm dtype), the HF models'
# tests all, and on an H200 GPT-2's ratio first (session67/call4.sh), within LIMIT seconds.
#   run(command="cd .snap && bash benchmarks/results/session70/call2.sh", carry=[".snap"], timeout_s=595)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}; LIMIT=${LIMIT:-580}
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee "$out/gpu.txt"
if grep -q H200 "$out/gpu.txt"; then
    OUT=$out/gpt2 && mkdir -p "$OUT" && OUT=$OUT bash benchmarks/results/session67/call4.sh
fi
timeout $((LIMIT - SECONDS - 150)) python -m pytest -v -n 8 -p no:cacheprovider --tb=short \
    tests/gpu --ignore=tests/gpu/test_hf_gpu.py > "$out/gpu_tests.log" 2>&1
echo "tests rc=$? at ${SECONDS}s: $(grep -c PASSED "$out/gpu_tests.log") passed, $(grep -c FAILED "$out/gpu_tests.log") failed"
grep -E "FAILED|^E |passed|failed" "$out/gpu_tests.log" | tail -25
timeout $((LIMIT - SECONDS)) python -m pytest -v -n 4 -p no:cacheprovider --tb=short \
    tests/gpu/test_hf_gpu.py > "$out/hf_tests.log" 2>&1
echo "hf tests rc=$? at ${SECONDS}s: $(grep -c PASSED "$out/hf_tests.log") passed, $(grep -c FAILED "$out/hf_tests.log") failed"
grep -E "FAILED|^E |passed|failed" "$out/hf_tests.log" | tail -10
