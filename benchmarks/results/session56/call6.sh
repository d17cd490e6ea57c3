#!/usr/bin/env bash
# Session 56, call 6: the GPU tests call 5 ran out of time for (the packed program by default,
# the gated-MLP ops, the LLaMA-like HF families, every program in the plain ping-pong
# configuration, whose operand prefetch now follows a warpgroup barrier), then LLaMA's training
# step against compile+graph in 6 interleaved rounds.
#   run(command="bash benchmarks/results/session56/call6.sh", timeout_s=598)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
OUT=${OUT:-benchmarks/results/session56/call6}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee "$OUT/gpu.txt"
N=""; python -c "import xdist" 2>/dev/null && N="-n 4"
PYTHONPATH=$PWD/src timeout 200 python -m pytest -q $N tests/gpu/test_triton_gpu.py tests/gpu/test_ops_gated.py \
    tests/gpu/test_hf_gpu.py > "$OUT/gpu_tests_full.txt" 2>&1 \
    -k "swiglu_grad_pack or packed_output or gated or llama or qwen2 or phi3 or (test_error_within_twice_eager and pingpong- )"
echo "gpu tests rc=$? at ${SECONDS}s"; grep -E "passed|failed|FAILED|Error" "$OUT/gpu_tests_full.txt" | tail -8 > "$OUT/gpu_tests.txt"
rm "$OUT/gpu_tests_full.txt"; cat "$OUT/gpu_tests.txt"
timeout 330 python benchmarks/train.py --models llama --modes compile+graph,coda+graph \
    --steps 15 --rounds 6 --warmup 3 --curve none --profile none --timeout 150 \
    --json "$OUT/train_llama.json" > "$OUT/train_llama.log" 2>&1
echo "llama rc=$? at ${SECONDS}s"; grep -E "tokens/s|round by round|rror" "$OUT/train_llama.log" | head -8
