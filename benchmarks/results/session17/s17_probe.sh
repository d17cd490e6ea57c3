#!/usr/bin/env bash
# Seventeenth session, first device call: clocks beside the times of fused cases (ping-pong and
# Triton kernels), then Nsight Compute on the ping-pong kernel of plain and fused cases.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
d=benchmarks/results/session17
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv
timeout 200 python $d/pingpong_probe.py clocks --json $OUT/clocks.json 2>&1 | tee $OUT/clocks.log | tail -60
mkdir -p /tmp/ncu
run() {  # shape case config
  timeout 60 ncu --clock-control none -k regex:coda_gemm --launch-skip 1 --launch-count 1 \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
    --section SchedulerStats --section WarpStateStats --section SourceCounters --section InstructionStats \
    --metrics sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,smsp__inst_executed.sum,sm__cycles_elapsed.avg.per_second,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum \
    -o /tmp/ncu/$1_$2_$3 python $d/pingpong_probe.py launch $1 $2 $3 > /tmp/ncu/$1_$2_$3.log 2>&1
  ncu -i /tmp/ncu/$1_$2_$3.ncu-rep --page details --csv > /tmp/ncu/$1_$2_$3.details.csv 2>&1
  ncu -i /tmp/ncu/$1_$2_$3.ncu-rep --page source --csv --print-source sass > /tmp/ncu/$1_$2_$3.sass.csv 2>&1
  grep -E "Duration|SM Frequency|tensor_op_hmma|Issue Slots Busy" /tmp/ncu/$1_$2_$3.details.csv | cut -c1-200 | sed "s/^/$1 $2 $3: /"
}
for c in plain residual residual_rowsumsq bias_gelu dgelu_bias_grad bias_gelu_dropout_residual; do
  run 16384x3072x768 $c pp_s4e4
done
for c in plain residual_rowsumsq bias_gelu_dropout_residual; do
  run 16384x8192x2048 $c pp_s4e4
done
rm -f /tmp/ncu/*.ncu-rep
tar czf $OUT/ncu.tgz -C /tmp ncu
ls -la $OUT
