#!/usr/bin/env bash
# Sixty-eighth session, call 2: (1) the GPU tests of the launch path and the HF models' GPT-2 and
# LLaMA tests on this session's build (a launch captured in a CUDA graph takes its TMA scratch
# from the graph's pool); the new side-by-side replay test also on the kernel.py before that
# change (OLD_KERNEL, a copy of HEAD~'s file, if given), to see whether it catches the shared
# buffer; (2) GPT-2 beside compile+graph, 6 interleaved rounds, each mode's step profiled once
# (the report's breakdown on the current build).
#   run(command="OLD_KERNEL=... bash benchmarks/results/session68/call2.sh", timeout_s=560)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee "$out/gpu.txt"
timeout 200 python -m pytest -v -n 4 -p no:cacheprovider --tb=short tests/gpu/test_launch_gpu.py \
    tests/gpu/test_hf_gpu.py -k "launch_gpu or gpt2 or llama" > "$out/tests.log" 2>&1
echo "tests rc=$? at ${SECONDS}s"; grep -E "FAILED|^E |passed|failed" "$out/tests.log" | tail -12
if [[ -n ${OLD_KERNEL:-} ]]; then
    rm -rf /tmp/oldsrc && cp -r src /tmp/oldsrc && cp "$OLD_KERNEL" /tmp/oldsrc/coda/codegen/kernel.py
    for i in 1 2 3; do
        PYTHONPATH=/tmp/oldsrc timeout 60 python -m pytest -q -p no:cacheprovider --tb=line \
            tests/gpu/test_launch_gpu.py -k two_graphs 2>&1 | tail -3
    done
    echo "old kernel.py at ${SECONDS}s"
fi
timeout 200 python benchmarks/train.py --models gpt2 --modes compile+graph,coda+graph --pad-mm always \
    --steps 15 --rounds 6 --warmup 3 --curve none --profile compile+graph,coda+graph --timeout 190 \
    --json "$out/train_gpt2.json" > "$out/train_gpt2.log" 2>&1
echo "gpt2 rc=$? at ${SECONDS}s"; grep -E "tokens/s|round by round|rror" "$out/train_gpt2.log" | head -8
