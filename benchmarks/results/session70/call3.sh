#!/usr/bin/env bash
# Seventieth session, call 3 (the session's last device seconds): the GPU tests that the audits'
# fixes after call 2 touch: the HF models' (coda.patch: quantized and Identity submodules, GPT-2's
# activation module, logits_to_keep, FSDP checks), coda.nn.GPT's, the compiled ops' (the fakes'
# dtypes and strides), the norms' and the gated MLP's (16-bit row sums refused), within LIMIT.
#   run(command="cd .snap && bash benchmarks/results/session70/call3.sh", carry=[".snap"], timeout_s=450)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}; LIMIT=${LIMIT:-420}
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee "$out/gpu.txt"
timeout $((LIMIT - 200)) python -m pytest -v -n 8 -p no:cacheprovider --tb=short tests/gpu/test_nn_gpt.py \
    tests/integrations/test_compile_gpu.py tests/gpu/test_ops_norms.py tests/gpu/test_ops_gated.py \
    > "$out/gpu_tests.log" 2>&1
echo "tests rc=$? at ${SECONDS}s: $(grep -c PASSED "$out/gpu_tests.log") passed, $(grep -c FAILED "$out/gpu_tests.log") failed"
grep -E "FAILED|^E |passed|failed" "$out/gpu_tests.log" | tail -15
timeout $((LIMIT - SECONDS)) python -m pytest -v -n 4 -p no:cacheprovider --tb=short \
    tests/gpu/test_hf_gpu.py > "$out/hf_tests.log" 2>&1
echo "hf tests rc=$? at ${SECONDS}s: $(grep -c PASSED "$out/hf_tests.log") passed, $(grep -c FAILED "$out/hf_tests.log") failed"
grep -E "FAILED|^E |passed|failed" "$out/hf_tests.log" | tail -10
