#!/usr/bin/env bash
# Sixty-seventh session, call 1: on an H200 first GPT-2 against compile+graph in 6 interleaved
# rounds (the sixty-fifth session's call 1 part, 1.199x against the target 1.2x in the 53rd);
# then the GPU infinities test (its `nan` output now saved: the
# sixty-sixth session's build failed it in all six mainloops on a KeyError, the test's own bug),
# then the sixty-fifth session's call 2 (the HF models' GPU tests, torch.compile's and the
# examples', `coda train --compare`, the launch counts) within LIMIT seconds.
#   run(command="bash benchmarks/results/session67/call1.sh", timeout_s=600)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}; LIMIT=${LIMIT:-585}
gpu=$(nvidia-smi --query-gpu=name,power.limit --format=csv,noheader); echo "$gpu" | tee "$out/gpu.txt"
case "$gpu" in *H200*)
    timeout 200 python benchmarks/train.py --models gpt2 --modes compile+graph,coda+graph --pad-mm always \
        --steps 20 --rounds 6 --warmup 3 --curve none --profile none --timeout 190 \
        --json "$out/train_gpt2.json" > "$out/train_gpt2.log" 2>&1
    echo "gpt2 rc=$? at ${SECONDS}s"; grep -E "tokens/s|round by round|rror" "$out/train_gpt2.log" | head -6 ;;
esac
timeout 120 python -m pytest -q -n 6 -p no:cacheprovider --tb=short \
    tests/gpu/test_triton_gpu.py -k infinities > "$out/infinities.log" 2>&1
echo "infinities rc=$? at ${SECONDS}s"; tail -3 "$out/infinities.log"
mkdir -p "$out/call2"; OUT="$out/call2" LIMIT=$((LIMIT - SECONDS)) bash benchmarks/results/session65/call2.sh
