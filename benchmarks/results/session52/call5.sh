#!/usr/bin/env bash
# The fifty-second session's fifth call: this session's later changes on the GPU: the HF, launch
# (capture_step) and compile GPU tests; LLaMA's coda+compile mode (the final norm under
# torch.compile: the coda::rms_norm custom op) beside compile, 2 rounds.
#   run(command="bash benchmarks/results/session52/call5.sh", timeout_s=400)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader
PYTHONPATH=$PWD/src timeout 200 python -m pytest -q -n 4 -p no:cacheprovider tests/gpu/test_hf_gpu.py \
    tests/gpu/test_launch_gpu.py tests/integrations/test_compile_gpu.py > "$out/tests.log" 2>&1
echo "tests rc=$? at ${SECONDS}s"; tail -3 "$out/tests.log"
timeout 170 python benchmarks/train.py --models llama --modes compile,coda+compile --steps 10 --rounds 2 \
    --warmup 3 --curve none --profile none --timeout 160 --json "$out/train_llama.json" > "$out/train_llama.log" 2>&1
echo "llama rc=$? at ${SECONDS}s"; grep -E "tokens/s|round by round|rror" "$out/train_llama.log" | head -6
