#!/usr/bin/env bash
# Seventieth session, call 1: the sixty-ninth session's call 2, not run then (no machine could be
# started), with GPT-2's ratio first where the GPU is an H200 (the target is read there).
# (1) on an H200 only: GPT-2 against compile+graph, 6 interleaved rounds (session67/call4.sh);
# (2) the HF GPU tests of Gemma 1-3 (bf16, and Gemma under autocast), LLaMA, Qwen3 and the gated
# MLP's pre-norm cases (float16 with a large residual stream among them);
# (3) in what is left of LIMIT: the training benchmark's Gemma (eager, liger, compile+graph,
# coda+graph, 4 rounds; the eager and coda+graph steps profiled).
#   run(command="cd .snap && bash benchmarks/results/session70/call1.sh", carry=[".snap"], timeout_s=595)
# (the snapshot holds .whl/, liger-kernel's wheel)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
out=${OUT:-/tmp}; LIMIT=${LIMIT:-580}
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee "$out/gpu.txt"
if grep -q H200 "$out/gpu.txt"; then
    OUT=$out/gpt2 && mkdir -p "$OUT" && OUT=$OUT bash benchmarks/results/session67/call4.sh
fi
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD/src:/tmp/site
timeout 260 python -m pytest -v -n 3 -p no:cacheprovider --tb=short tests/gpu/test_hf_gpu.py \
    tests/gpu/test_ops_gated.py -k "${K:-gemma or llama or qwen3 or prenorm}" > "$out/hf_tests.log" 2>&1
echo "tests rc=$? at ${SECONDS}s"; grep -E "FAILED|^E |passed|failed" "$out/hf_tests.log" | tail -24
left=$((LIMIT - SECONDS)); (( left > 150 )) || exit 0
timeout $left python benchmarks/train.py --models gemma \
    --modes eager,liger,compile+graph,coda+graph --steps 8 --rounds 4 --warmup 3 \
    --curve none --profile eager,coda+graph --timeout $((left - 10)) --json "$out/train_gemma.json" \
    > "$out/train_gemma.log" 2>&1
echo "gemma rc=$? at ${SECONDS}s"; grep -E "^\| gemma|round by round|rror" "$out/train_gemma.log" | head -12
