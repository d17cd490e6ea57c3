#!/usr/bin/env bash
# For the next session's first call (no device came for the seventy-second session's call 2):
# call2.py (m_limit / k_limit in every mainloop, int32 and int64 limits; signed zeros in the
# generated code), the two cross-entropy tests that ran out of memory beside other workers, alone,
# then on an H200 the issue 6 / 8 readings (session70/next_session.sh; the snapshot needs the
# session67, session70 and session72 result folders), elsewhere the GPU tests of the nn blocks and
# HF models (test_hf_gpu.py: coda.patch's output-recorder change).
#   run(command="cd .snap && bash benchmarks/results/session72/next_session.sh", kind="nvidia-h200",
#       carry=[".snap"], timeout_s=595)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee "$out/gpu.txt"
timeout 150 python benchmarks/results/session72/call2.py > "$out/call2.log" 2>&1
echo "call2 rc=$? at ${SECONDS}s"; grep -E "FAIL|failures|gpu" "$out/call2.log" | tail -12
timeout 120 python -m pytest -q -p no:cacheprovider --tb=short tests/gpu/test_ops_cross_entropy.py \
    -k "test_skip_ignored_bf16" > "$out/ce_tests.log" 2>&1
echo "ce tests rc=$? at ${SECONDS}s"; tail -2 "$out/ce_tests.log"
if grep -q H200 "$out/gpu.txt"; then
    OUT=$out LIMIT=$((580 - SECONDS)) bash benchmarks/results/session70/next_session.sh
else
    timeout $((585 - SECONDS)) python -m pytest -q -n 4 -p no:cacheprovider --tb=short \
        tests/gpu/test_hf_gpu.py > "$out/hf_tests.log" 2>&1
    echo "hf tests rc=$? at ${SECONDS}s"; tail -2 "$out/hf_tests.log"
fi
