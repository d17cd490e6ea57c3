#!/usr/bin/env bash
# Sixtieth session, call 2 (any GPU, about a minute): call 1 found that (c)'s residual adds only
# its own bytes to DRAM's reads and runs at a higher clock than plain, so it costs cycles. Is the
# L2 the bound (its sectors' throughput against peak: A's and B's tiles come from L2 at every K
# step, and the operand's fill and read add to it), or the tensor pipe's feed?
#   run(command="bash benchmarks/results/session60/call2.sh", timeout_s=300)
METRICS=gpu__time_duration.sum,lts__t_sectors.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,\
sm__inst_executed_pipe_tensor_op_gmma.avg.pct_of_peak_sustained_active \
    bash benchmarks/results/session59/next_dram.sh
