#!/usr/bin/env bash
# Forty-third session, call 7 (the last minutes of device time): is stream-K's cost per K block
# L2 reuse? fc1's weight gradient at K = 16384 and 4096 (stream_k_l2.py), then Nsight Compute's
# DRAM bytes and L2 hit rate of the heuristic's launch and stream-K's at K = 16384.
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
timeout 80 python benchmarks/results/session43/stream_k_l2.py > "$out/stream_k_l2.log" 2>&1
echo "timings rc=$?"; grep -E "µs|K=" "$out/stream_k_l2.log"
for label in "K=16384 heuristic" "K=16384 stream-K"; do
  timeout 45 ncu --clock-control none -k regex:coda_gemm --launch-skip 2 --launch-count 1 \
      --metrics dram__bytes_read.sum,lts__t_sector_hit_rate.pct,gpu__time_duration.sum \
      python benchmarks/results/session43/stream_k_l2.py one "$label" > "$out/ncu_${label//[ =]/_}.log" 2>&1
  echo "ncu $label rc=$?"; grep -E "dram__bytes|hit_rate|duration" "$out/ncu_${label//[ =]/_}.log"
done
