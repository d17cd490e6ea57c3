#!/usr/bin/env bash
# Sixty-first session, call 1 (any GPU, about 3 minutes): where do the warps of (c) residual +
# row sum of squares stall at K = 768 that they do not when the residual comes from L2?
# Nsight Compute's warp-state and source-counter (PC sampling per SASS instruction) sections on
# the second launch of plain, (c), (c)'s `l2` edit (its residual from L2) and its `nofetch` edit, one process each;
# the source page exported per SASS instruction.
#   run(command="bash benchmarks/results/session61/call1.sh", timeout_s=420)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee "$out/gpu.txt"
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu | head -1)
"$NCU" --version | tail -1
for v in ${VARIANTS:-plain c l2}; do
    timeout 90 "$NCU" --clock-control none -k regex:coda --launch-skip 1 --launch-count 1 \
        --section WarpStateStats --section SourceCounters --section ComputeWorkloadAnalysis \
        --section SpeedOfLight -o "$out/$v" \
        python benchmarks/results/session61/stall_probe.py --variant $v > "$out/$v.log" 2>&1
    echo "$v rc=$? at ${SECONDS}s"; tail -1 "$out/$v.log"
    "$NCU" -i "$out/$v.ncu-rep" --page source --csv --print-source sass > "$out/${v}_sass.csv" 2> "$out/${v}_sass.err" \
        || "$NCU" -i "$out/$v.ncu-rep" --page source --csv > "$out/${v}_sass.csv" 2>> "$out/${v}_sass.err"
    "$NCU" -i "$out/$v.ncu-rep" --page raw --csv > "$out/${v}_raw.csv" 2>> "$out/${v}_sass.err"
    "$NCU" -i "$out/$v.ncu-rep" --page details > "$out/${v}_details.txt" 2>> "$out/${v}_sass.err"
    wc -c "$out/${v}_sass.csv" "$out/${v}_raw.csv"; head -c 300 "$out/${v}_sass.err"
done
ls -la "$out"
