#!/usr/bin/env bash
# Fifty-eighth session, call 5: call 4's 40 failures again with two workers (call 4 ran eight on
# an 80 GB H100: out of memory, and errors that followed one in the same worker), after the
# first test whose worker then failed everything, alone, with blocking launches.
#   run(command="bash benchmarks/results/session58/call5.sh", timeout_s=598)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee "$out/gpu.txt"
CUDA_LAUNCH_BLOCKING=1 timeout 120 python -m pytest -q -p no:cacheprovider --tb=short \
    "tests/gpu/test_triton_gpu.py::test_maxima_keep_a_nan_in_every_mainloop" > "$out/maxima.txt" 2>&1
echo "maxima rc=$? at ${SECONDS}s"; grep -E "passed|failed|Error" "$out/maxima.txt" | tail -5
mapfile -t ids < benchmarks/results/session58/call4/failed_ids.txt
timeout 420 python -m pytest -q -n 2 -p no:cacheprovider --tb=short "${ids[@]}" > "$out/rerun_full.txt" 2>&1
echo "rerun rc=$? at ${SECONDS}s"
grep -E "passed|failed|FAILED|^E  .*(Error|assert)" "$out/rerun_full.txt" | tail -30 > "$out/rerun.txt"; cat "$out/rerun.txt"
