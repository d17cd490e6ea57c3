#!/usr/bin/env bash
# Sixty-first session, call 4 (any GPU, about a minute): does a deeper A/B ring take the waits
# for A and B away from (c) at K = 768? Nsight Compute's PC sampling (as call1.sh) of (c) and
# of its `nofetch` edit with a 5-deep ring, the kernel time and the L2 / crossbar throughputs.
#   run(command="bash benchmarks/results/session61/call4.sh", timeout_s=240)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
mkdir -p /tmp/call4
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee /tmp/call4/gpu.txt
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu | head -1)
for v in c nofetch; do
    timeout 90 "$NCU" --clock-control none -k regex:coda --launch-skip 1 --launch-count 1 \
        --section WarpStateStats --section SourceCounters --section ComputeWorkloadAnalysis \
        --section MemoryWorkloadAnalysis --section SpeedOfLight -o "/tmp/call4/${v}5" \
        python benchmarks/results/session61/stall_probe.py --variant $v --stages 5 > "/tmp/call4/${v}5.log" 2>&1
    echo "$v rc=$? at ${SECONDS}s"; tail -1 "/tmp/call4/${v}5.log"
    "$NCU" -i "/tmp/call4/${v}5.ncu-rep" --page source --csv --print-source sass > "/tmp/call4/${v}5_sass.csv"
    "$NCU" -i "/tmp/call4/${v}5.ncu-rep" --page raw --csv > "/tmp/call4/${v}5_raw.csv"
done
(cd /tmp/call4 && tar czf "$out/call4.tgz" *.csv *.log gpu.txt) && ls -la "$out"
