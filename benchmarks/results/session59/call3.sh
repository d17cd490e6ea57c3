#!/usr/bin/env bash
# Fifty-ninth session, call 3: the clock and power of case (b)'s kernels against plain and (a),
# with CODA's Philox-10, without its rounds, and with multiply-free Threefry-2x32-13 (clock_probe.py).
#   run(command="bash benchmarks/results/session59/call3.sh", timeout_s=598)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader | tee "$out/gpu.txt"
python -c "import pynvml" 2>&1 | tail -1
for rng in ${RNGS:-philox10 threefry13 philox0}; do   # RNGS="..." picks others
    TRITON_CACHE_DIR=/tmp/triton_$rng timeout 170 python benchmarks/results/session59/clock_probe.py \
        --rng $rng --json "$out/clock_$rng.json" > "$out/clock_$rng.log" 2>&1
    echo "$rng rc=$? at ${SECONDS}s"; grep -E "^\{|rror" "$out/clock_$rng.log" | cut -c1-220
done
