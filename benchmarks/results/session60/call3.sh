#!/usr/bin/env bash
# Sixtieth session, call 3 (any GPU, about a minute): which SM resource does (c)'s residual
# cost at K = 768? Nsight Compute's memory-workload, compute-workload and warp-state sections
# (raw metrics) of plain and (c) in the ping-pong kernel at 16384x3072x768, three launches each.
#   run(command="bash benchmarks/results/session60/call3.sh", timeout_s=300)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu | head -1)
timeout 200 "$NCU" --clock-control none -k regex:coda --launch-count 6 \
    --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section WarpStateStats \
    --page raw --csv python benchmarks/results/session59/clock_probe.py --shape 16384x3072x768 \
    --profile plain,residual_rowsumsq > "$out/ncu_sm.csv" 2> "$out/ncu_sm.err"
echo "rc=$? at ${SECONDS}s"; tail -2 "$out/ncu_sm.err"; wc -c "$out/ncu_sm.csv"
