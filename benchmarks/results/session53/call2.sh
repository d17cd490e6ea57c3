#!/usr/bin/env bash
# The fifty-third session's second call: `Config.prefetch_tiles` (L2 prefetches of a tile's
# epilogue operands as its K loop starts) against the heuristic's Triton kernel, on the fast-path
# epilogues with a tile operand at K >= 2048 and on LLaMA's SwiGLU gradient and gated dx.
#   run(command="bash benchmarks/results/session53/call2.sh", timeout_s=400)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader
timeout 380 python benchmarks/results/session53/prefetch_probe.py > "$out/prefetch_probe.log" 2>&1
echo "prefetch rc=$? at ${SECONDS}s"; grep -v Warning "$out/prefetch_probe.log" | tail -45
