#!/usr/bin/env bash
# The fifty-fourth session's first call: probes.py (the q/k/v stack by row gathers against the cat of
# permuted views; the SwiGLU gradient fused and as GEMM + map); the 53rd's call 6 (dx's GEMM leaving the long-K bias gradient to a column-sum
# map: layer_norm_linear's kernels at LLaMA-7B size); the whole micro suite with Liger; LLaMA
# against compile+graph, 6 interleaved rounds, on the current build (GPT-2 runs no changed code).
#   run(command="bash benchmarks/results/session54/call1.sh", carry=[".whl"], timeout_s=598)
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader
PYTHONPATH=$PWD/src timeout 60 python benchmarks/results/session54/probes.py 2>&1 | grep -v -i warn | tail -12
PYTHONPATH=$PWD/src timeout 70 python benchmarks/results/session53/norm_linear_kernels.py \
    --cases layer_norm_linear:llama7b > "$out/kernels.log" 2>&1
echo "kernels rc=$? at ${SECONDS}s"; grep -v -i warn "$out/kernels.log" | grep -A9 "^== " | cut -c1-120 | head -40
PYTHONPATH=/tmp/site timeout 215 python benchmarks/micro.py --max-autotune '' --json "$out/micro.json" \
    > "$out/micro.log" 2>&1
echo "micro rc=$? at ${SECONDS}s"; grep -A24 "replayed from CUDA" "$out/micro.log" | cut -c1-130
timeout 125 python benchmarks/train.py --models llama --modes compile+graph,coda+graph --pad-mm always \
    --steps 20 --rounds 6 --warmup 3 --curve none --profile none --timeout 118 \
    --json "$out/train_llama.json" > "$out/train_llama.log" 2>&1
echo "llama rc=$? at ${SECONDS}s"; grep -E "tokens/s|round by round|rror" "$out/train_llama.log" | head -6
