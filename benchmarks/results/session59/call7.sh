#!/usr/bin/env bash
# Fifty-ninth session, call 7: Nsight Compute on case (b)'s ping-pong kernel at 16384x8192x2048
# with Philox-10, no rounds and Threefry-13 (and the plain kernel beside each): which pipes the
# wide multiplies load. All three launches of each kernel, raw metrics of three sections.
#   run(command="bash benchmarks/results/session59/call7.sh", timeout_s=290)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu | head -1); echo "ncu: $NCU"
for rng in ${RNGS:-philox10 threefry13 philox0}; do
    TRITON_CACHE_DIR=/tmp/triton_$rng timeout 110 "$NCU" --clock-control none -k regex:coda --launch-count 6 \
        --section SpeedOfLight --section ComputeWorkloadAnalysis \
        --section WarpStateStats --page raw --csv \
        python benchmarks/results/session59/clock_probe.py --rng $rng --profile \
        > "$out/ncu_$rng.csv" 2> "$out/ncu_$rng.err"
    echo "$rng rc=$? at ${SECONDS}s"; tail -2 "$out/ncu_$rng.err"
done
