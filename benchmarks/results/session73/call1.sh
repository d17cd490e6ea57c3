#!/usr/bin/env bash
# Seventy-third session, first device call: the GPU checks of the seventy-second and
# seventy-third sessions' changes, then (on an H200 only) the issue 6 / 8 readings.
#   (1) session72/call2.py: m_limit / k_limit in every mainloop (int32 and int64 limits), signed
#       zeros in the generated code;
#   (2) cross-entropy on the GPU: skip_ignored in bf16 (alone: beside other workers they ran
#       out of memory) and the exponential path past its headroom, with the hot rows counted
#       and ignored (an ignored row's overflow made NaN gradients before this session);
#   (3) a scalar operand's -0.0 (a Python float is a kernel argument on the GPU) and the other
#       special-value tests of test_triton_gpu.py;
#   (4) on an H200: session70/next_session.sh (GPT-2 against compile+graph, issue 8's table);
#       elsewhere the HF models on the GPU (the LLaMA layers' KV cache now holds HF's key order).
#   run(command="cd .snap && bash benchmarks/results/session73/call1.sh", carry=[".snap"], timeout_s=595)
# The snapshot needs the session67, session70, session72 and session73 result folders.
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee "$out/gpu.txt"
timeout 150 python benchmarks/results/session72/call2.py > "$out/call2.log" 2>&1
echo "call2 rc=$? at ${SECONDS}s"; grep -E "FAIL|failures|gpu" "$out/call2.log" | tail -12
timeout 150 python -m pytest -q -p no:cacheprovider --tb=short tests/gpu/test_ops_cross_entropy.py \
    -k "test_skip_ignored_bf16 or headroom" > "$out/ce_tests.log" 2>&1
echo "ce tests rc=$? at ${SECONDS}s"; tail -3 "$out/ce_tests.log"
timeout 120 python -m pytest -q -p no:cacheprovider --tb=short tests/gpu/test_triton_gpu.py \
    -k "scalar_operand or extreme or special or zero" > "$out/special_tests.log" 2>&1
echo "special-value tests rc=$? at ${SECONDS}s"; tail -3 "$out/special_tests.log"
if grep -q H200 "$out/gpu.txt"; then
    OUT=$out LIMIT=$((580 - SECONDS)) bash benchmarks/results/session70/next_session.sh
else
    timeout $((585 - SECONDS)) python -m pytest -q -n 4 -p no:cacheprovider --tb=short \
        tests/gpu/test_hf_gpu.py > "$out/hf_tests.log" 2>&1
    echo "hf tests rc=$? at ${SECONDS}s"; tail -3 "$out/hf_tests.log"
fi
