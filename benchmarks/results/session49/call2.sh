#!/usr/bin/env bash
# Forty-ninth session, second call: RMSNorm's one-pass backward with cuBLAS's GEMMs around it (this
# tree: dy @ w and dy.T @ xn by torch.matmul where dy is one tensor and no bias gradient is
# summed), against the same pass between CODA's plain GEMMs (variants/plain: call 1's tree) and
# the fold's backward (variants/base). The micro suite's rms_norm_linear in each tree, then
# LLaMA's training step (qkv_rope's norm takes the same backward) in interleaved rounds.
#   run(command="bash benchmarks/results/session49/call2.sh", carry=["variants"], timeout_s=580)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader
for tree in base plain; do
    timeout 60 python variants/$tree/benchmarks/micro.py --ops rms_norm_linear --no-compile --no-liger \
        --json "$out/micro_$tree.json" > "$out/micro_$tree.log" 2>&1
    echo "micro $tree rc=$? at ${SECONDS}s"; grep -A4 "replayed from CUDA" "$out/micro_$tree.log" | cut -c1-120
done
timeout 60 python benchmarks/micro.py --ops rms_norm_linear --no-compile --no-liger \
    --json "$out/micro_new.json" > "$out/micro_new.log" 2>&1
echo "micro new rc=$? at ${SECONDS}s"; grep -A4 "replayed from CUDA" "$out/micro_new.log" | cut -c1-120
timeout $((560 - SECONDS)) python benchmarks/train.py --models llama --modes compile+graph,coda+graph \
    --tree base=variants/base/src --tree plain=variants/plain/src --steps 20 --rounds 8 --warmup 3 \
    --curve none --profile none --timeout 420 --json "$out/train_llama.json" > "$out/train_llama.log" 2>&1
echo "llama rc=$? at ${SECONDS}s"; grep -E "tokens/s|round by round|rror" "$out/train_llama.log" | head -20
