#!/usr/bin/env bash
# Fifty-eighth session, call 1: (1) the contention question left by the fifty-seventh session
# (ablation_probe.py's `twice` and `l2` edits: is a tile operand's cost its bytes through the
# SM's port, or the HBM's bursts?); (2) what dropout's Philox rounds cost in case (b), at 10, 7
# and 0 rounds, one process each; (3) on an H200 only, GPT-2 against compile+graph, 6 rounds.
#   run(command="bash benchmarks/results/session58/call1.sh", timeout_s=598)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
out=${OUT:-/tmp}
gpu=$(nvidia-smi --query-gpu=name,power.limit --format=csv,noheader); echo "$gpu" | tee "$out/gpu.txt"
PYTHONPATH=$PWD/src timeout 170 python benchmarks/results/session57/ablation_probe.py --sets contention,llama \
    --events --rounds 3 --json "$out/contention.json" > "$out/contention.log" 2>&1
echo "contention rc=$? at ${SECONDS}s"; grep -E '^\{' "$out/contention.log"
for r in 10 7 0; do
    TRITON_CACHE_DIR=/tmp/triton_rounds_$r timeout 100 python benchmarks/results/session58/rounds_probe.py \
        --philox-rounds $r --json "$out/rounds_$r.json" > "$out/rounds_$r.log" 2>&1
    echo "rounds $r rc=$? at ${SECONDS}s"; grep -E "over plain|rror" "$out/rounds_$r.log"
done
case "$gpu" in *H200*) ;; *) exit 0 ;; esac
timeout 160 python benchmarks/train.py --models gpt2 --modes compile+graph,coda+graph --pad-mm always \
    --steps 20 --rounds 6 --warmup 3 --curve none --profile none --timeout 150 \
    --json "$out/train_gpt2.json" > "$out/train_gpt2.log" 2>&1
echo "gpt2 rc=$? at ${SECONDS}s"; grep -E "tokens/s|round by round|rror" "$out/train_gpt2.log" | head -6
