#!/usr/bin/env bash
# Sixty-second session, call 3: the GPU tests of pair_rows, then paired_plain_probe.py (the
# plain GEMM with pair_rows against the heuristic's choice, the ping-pong configuration and cuBLAS).
#   run(command="bash benchmarks/results/session62/call3.sh", timeout_s=598)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src:$PWD/benchmarks/results/session62
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee "$out/gpu.txt"
timeout 250 python -m pytest -q -x tests/gpu/test_triton_gpu.py -k "paired" -p no:cacheprovider \
    > "$out/pytest_paired.log" 2>&1
echo "pytest rc=$? at ${SECONDS}s"; tail -3 "$out/pytest_paired.log"
timeout $((585 - SECONDS)) python benchmarks/results/session62/paired_plain_probe.py \
    --json "$out/paired_plain.json" 2>&1 | tee "$out/paired_plain.log" | grep -v "^round"
echo "rc=${PIPESTATUS[0]} at ${SECONDS}s"
