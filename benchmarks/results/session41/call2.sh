#!/usr/bin/env bash
# Forty-first session, call 2: A's column sums (`a_col_sums=True`) in a warp of their own in the
# ping-pong kernel: the whole GPU suite, GPT-2's CODA GEMM launches beside cuBLAS (call 1 timed
# them with the sums in the MMA warpgroups), GPT-2 against compile+graph in interleaved rounds.
#   run(command="bash benchmarks/results/session41/call2.sh", timeout_s=600)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > "$out/gpu.txt"
timeout 290 python -m pytest -q -n 12 -p no:cacheprovider tests/gpu tests/integrations/test_compile_gpu.py \
    > "$out/gpu_suite.log" 2>&1
echo "suite rc=$?"; tail -3 "$out/gpu_suite.log"
timeout 90 python benchmarks/kernel_configs.py gpt2 --configs none-but-the-heuristic \
    --json "$out/gpt2_launches.json" > "$out/gpt2_launches.log" 2>&1
echo "launches rc=$?"; tail -2 "$out/gpt2_launches.log"
timeout 180 python benchmarks/train.py --models gpt2 --modes compile+graph,coda+graph --steps 30 --rounds 10 \
  --warmup 3 --curve none --profile none --timeout 170 --json "$out/train.json" > "$out/train.log" 2>&1
echo "train rc=$?"; grep -E "tokens/s|round by round|rror" "$out/train.log" | head -8
