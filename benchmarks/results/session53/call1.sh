#!/usr/bin/env bash
# The fifty-third session's first call: (1) the norm-folded linears' fwd+bwd kernel by kernel,
# eager / torch.compile / CODA each replayed from a CUDA graph (CODA trails the peer by 1-6% there
# in the micro suite); (2) on an H200 only, GPT-2, BERT and LLaMA beside compile+graph, 8 rounds
# (the fifty-second session's call 1: the H200 rows for the current build).
#   run(command="bash benchmarks/results/session53/call1.sh", timeout_s=598)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
out=${OUT:-/tmp}
gpu=$(nvidia-smi --query-gpu=name,power.limit --format=csv,noheader); echo "$gpu"
PYTHONPATH=$PWD/src timeout 200 python benchmarks/results/session53/norm_linear_probe.py \
    > "$out/norm_linear_probe.log" 2>&1
echo "probe rc=$? at ${SECONDS}s"; grep -E "^==|of kernels|rror" "$out/norm_linear_probe.log"
case "$gpu" in *H200*) ;; *) exit 0 ;; esac
for model in gpt2 bert llama; do
    timeout 125 python benchmarks/train.py --models $model --modes compile+graph,coda+graph --pad-mm always \
        --steps 20 --rounds 6 --warmup 3 --curve none --profile none --timeout 118 \
        --json "$out/train_$model.json" > "$out/train_$model.log" 2>&1
    echo "$model rc=$? at ${SECONDS}s"; grep -E "tokens/s|round by round|rror" "$out/train_$model.log" | head -6
done
