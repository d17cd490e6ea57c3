#!/usr/bin/env bash
# Sixty-seventh session, call 1: the GPU infinities test (its `nan` output now saved: the
# sixty-sixth session's build failed it in all six mainloops on a KeyError, the test's own bug),
# then the sixty-fifth session's call 2 (the HF models' GPU tests, torch.compile's and the
# examples', `coda train --compare`, the launch counts) within LIMIT seconds.
#   run(command="bash benchmarks/results/session67/call1.sh", timeout_s=600)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}; LIMIT=${LIMIT:-585}
timeout 120 python -m pytest -q -n 6 -p no:cacheprovider --tb=short \
    tests/gpu/test_triton_gpu.py -k infinities > "$out/infinities.log" 2>&1
echo "infinities rc=$? at ${SECONDS}s"; tail -3 "$out/infinities.log"
mkdir -p "$out/call2"; OUT="$out/call2" LIMIT=$((LIMIT - SECONDS)) bash benchmarks/results/session65/call2.sh
