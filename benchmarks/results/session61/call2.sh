#!/usr/bin/env bash
# Sixty-first session, call 2 (any GPU, about a minute; needs chunk_rows.patch applied):
# chunk_probe.py ((c) and (e) with their operand fetched in row chunks by the loader warp; each
# kernel's error against the reference, then timings beside plain, (c) and (c) from L2) at
# 16384x3072x768 and 16384x8192x2048, then, in the time left, call1.sh's PC sampling of (c) and l2.
#   run(command="bash benchmarks/results/session61/call2.sh", timeout_s=590)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
timeout 220 python benchmarks/results/session61/chunk_probe.py --rows 16,32 --rounds 4 --json "$out/chunk_probe.json" 2>&1 \
    | tee "$out/chunk_probe.log" | grep -v "^round"
echo "chunk_probe rc=$? at ${SECONDS}s"
# Nsight Compute only in the time left (device time was short in this session)
[ "$SECONDS" -lt 200 ] && VARIANTS="c l2" bash benchmarks/results/session61/call1.sh
