#!/usr/bin/env bash
# Forty-first session, call 4: what A's column sums change in the ping-pong kernel at GPT-2's ln_1
# backward GEMM shape, under Nsight Compute (sums_ncu.py, third launch of each).
#   run(command="bash benchmarks/results/session41/call4.sh", timeout_s=300)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
metrics=gpu__time_duration.sum,sm__cycles_elapsed.avg,smsp__inst_executed.sum,\
sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed,\
l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,\
l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,smsp__sass_inst_executed_op_shared_ld.sum,\
lts__t_bytes.sum,dram__bytes.sum,l1tex__throughput.avg.pct_of_peak_sustained_elapsed,\
smsp__warp_issue_stalled_barrier_per_warp_active.pct,smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct,\
smsp__warp_issue_stalled_mio_throttle_per_warp_active.pct,smsp__warp_issue_stalled_short_scoreboard_per_warp_active.pct,\
smsp__warp_issue_stalled_wait_per_warp_active.pct,smsp__warp_issue_stalled_sleeping_per_warp_active.pct,\
sm__warps_active.avg.pct_of_peak_sustained_active
which ncu || ls /usr/local/cuda*/bin/ncu
for sums in 0 1; do
  timeout 120 ncu --clock-control none -k regex:coda_gemm --launch-skip 2 --launch-count 1 --metrics "$metrics" \
    --csv python benchmarks/results/session41/sums_ncu.py $sums > "$out/ncu_sums$sums.csv" 2> "$out/ncu_sums$sums.err"
  echo "sums=$sums rc=$?"; tail -2 "$out/ncu_sums$sums.err"
done
python - "$out" <<'PY'
import csv, sys
rows = {}
for sums in "01":
    text = open(f"{sys.argv[1]}/ncu_sums{sums}.csv").read().splitlines()
    start = next(i for i, l in enumerate(text) if l.startswith('"ID"'))
    for r in csv.DictReader(text[start:]):
        rows.setdefault(r["Metric Name"], {})[sums] = (r["Metric Value"], r["Metric Unit"])
for name, v in rows.items():
    print(f"{name:75s} {v.get('0', ('', ''))[0]:>16} {v.get('1', ('', ''))[0]:>16} {v.get('0', ('', ''))[1]}")
PY
