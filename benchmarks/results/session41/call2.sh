#!/usr/bin/env bash
# Forty-first session, call 2: A's column sums (`a_col_sums=True`) in a warp of their own in the
# ping-pong kernel: the whole GPU suite, GPT-2's CODA GEMM launches beside cuBLAS (call 1 timed
# them with the sums in the MMA warpgroups), GPT-2 against compile+graph in interleaved rounds.
#   run(command="bash benchmarks/results/session41/call2.sh", timeout_s=600)
# The same commands as call 1, on the build with the sums in a warp of their own (commit 680498c).
exec bash "$(dirname "$0")/call1.sh"
