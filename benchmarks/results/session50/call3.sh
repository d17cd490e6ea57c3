#!/usr/bin/env bash
# Fiftieth session, call 3: main with the norms' backward prefetch (call 2's variant, landed):
# the bf16 GPU tests of the norms, the GPT module and the HF models; then GPT-2 and BERT beside
# compile+graph, and LLaMA beside compile+graph and the tree before the change (variants/prev:
# `git archive HEAD~1 src`, for RMSNorm's backward with dres read late), interleaved rounds.
#   run(command="bash benchmarks/results/session50/call3.sh", carry=["variants"], timeout_s=595)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader
PYTHONPATH=$PWD/src timeout 200 python -m pytest -q -x -p no:cacheprovider tests/gpu/test_ops_norms.py \
    tests/gpu/test_nn_gpt.py tests/gpu/test_hf_gpu.py > "$out/gpu_tests.log" 2>&1
echo "gpu tests rc=$? at ${SECONDS}s"; tail -3 "$out/gpu_tests.log" | cut -c1-200
for spec in "gpt2 compile+graph,coda+graph 8" "bert compile+graph,coda+graph 8"; do
    set -- $spec
    timeout 130 python benchmarks/train.py --models $1 --modes $2 --pad-mm always --steps 20 --rounds $3 \
        --warmup 3 --curve none --profile none --timeout 120 --json "$out/train_$1.json" > "$out/train_$1.log" 2>&1
    echo "$1 rc=$? at ${SECONDS}s"; grep -E "tokens/s|round by round|rror" "$out/train_$1.log" | head -8
done
timeout $((590 - SECONDS)) python benchmarks/train.py --models llama --modes compile+graph,coda+graph \
    --tree prev=variants/prev/src --steps 15 --rounds 6 --warmup 3 --curve none --profile none --timeout 250 \
    --json "$out/train_llama.json" > "$out/train_llama.log" 2>&1
echo "llama rc=$? at ${SECONDS}s"; grep -E "tokens/s|round by round|rror" "$out/train_llama.log" | head -8
