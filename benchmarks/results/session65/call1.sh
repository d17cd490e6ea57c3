#!/usr/bin/env bash
# Sixty-fifth session, call 1: on an H200 first GPT-2 against compile+graph in 6 interleaved
# rounds (1.199x in the 53rd session, the target 1.2x; every call since got an H100). Then, on
# any GPU, the GPU suite but the HF models' tests (last run whole in the 59th session; the 60th-64th
# changed the ping-pong kernel's paired rows, folded inf/NaN constants, dropout's probability
# clamp, the norm kernels' strided vectors), eight workers, within LIMIT seconds in all.
#   run(command="bash benchmarks/results/session65/call1.sh", timeout_s=600)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}; LIMIT=${LIMIT:-585}
gpu=$(nvidia-smi --query-gpu=name,power.limit --format=csv,noheader); echo "$gpu" | tee "$out/gpu.txt"
case "$gpu" in *H200*)
    timeout 200 python benchmarks/train.py --models gpt2 --modes compile+graph,coda+graph --pad-mm always \
        --steps 20 --rounds 6 --warmup 3 --curve none --profile none --timeout 190 \
        --json "$out/train_gpt2.json" > "$out/train_gpt2.log" 2>&1
    echo "gpt2 rc=$? at ${SECONDS}s"; grep -E "tokens/s|round by round|rror" "$out/train_gpt2.log" | head -6 ;;
esac
timeout $((LIMIT - SECONDS)) python -m pytest -v -n 8 -p no:cacheprovider --tb=short \
    tests/gpu --ignore=tests/gpu/test_hf_gpu.py > "$out/gpu_tests.log" 2>&1
echo "tests rc=$? at ${SECONDS}s: $(grep -c PASSED "$out/gpu_tests.log") passed, $(grep -c FAILED "$out/gpu_tests.log") failed"
grep -E "FAILED|^E |passed|failed" "$out/gpu_tests.log" | tail -25
