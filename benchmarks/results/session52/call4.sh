#!/usr/bin/env bash
# The fifty-second session's fourth call: LLaMA's final norm patched (coda.nn.rms_norm on the last
# layer's carried sums; it was HF's float32 round trip, ~1.3 ms of eager kernels a step in call 3's
# profile). (1) the HF GPU tests (bf16 and autocast within eager's error, every family);
# (2) LLaMA beside compile+graph, 8 interleaved rounds; (3) one profiled LLaMA coda+graph step.
#   run(command="bash benchmarks/results/session52/call4.sh", timeout_s=560)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader
PYTHONPATH=$PWD/src timeout 150 python -m pytest -q -p no:cacheprovider tests/gpu/test_hf_gpu.py > "$out/tests.log" 2>&1
echo "tests rc=$? at ${SECONDS}s"; tail -3 "$out/tests.log"
timeout 200 python benchmarks/train.py --models llama --modes compile+graph,coda+graph --pad-mm always \
    --steps 20 --rounds 8 --warmup 3 --curve none --profile none --timeout 190 \
    --json "$out/train_llama.json" > "$out/train_llama.log" 2>&1
echo "llama rc=$? at ${SECONDS}s"; grep -E "tokens/s|round by round|rror" "$out/train_llama.log" | head -6
timeout 120 python benchmarks/train.py --models llama --modes coda+graph --steps 10 --rounds 1 --warmup 3 \
    --curve none --profile coda+graph --timeout 110 --json "$out/profile_llama.json" > "$out/profile_llama.log" 2>&1
echo "profile rc=$? at ${SECONDS}s"
