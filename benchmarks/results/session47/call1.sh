#!/usr/bin/env bash
# Forty-seventh session, call 1: the whole GPU suite on main (the HF model tests now take turns,
# after call 2 of the 46th session ran them out of memory twelve at a time), verbose so that a
# timeout still names what ran; then GPT-2 trained by main (LayerNorm's backward a row a warp)
# beside compile+graph, 10 rounds, round by round ratios.
#   run(command="bash benchmarks/results/session47/call1.sh", timeout_s=600)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
timeout 330 python -m pytest -v -n 8 -p no:cacheprovider -rf tests/gpu tests/integrations/test_compile_gpu.py \
    tests/examples > "$out/gpu_tests.log" 2>&1
echo "gpu tests rc=$? at ${SECONDS}s"; grep -E "^FAILED|^ERROR|passed|failed" "$out/gpu_tests.log" | cut -c1-250 | head -20
timeout 240 python benchmarks/train.py --models gpt2 --modes compile+graph,coda+graph \
    --steps 30 --rounds 10 --warmup 3 --curve none --profile coda+graph,compile+graph --timeout 230 \
    --json "$out/train_gpt2.json" > "$out/train_gpt2.log" 2>&1
echo "gpt2 rc=$? at ${SECONDS}s"; grep -E "tokens/s|round by round|rror" "$out/train_gpt2.log" | head -8
python benchmarks/breakdown.py "$out/train_gpt2.json" --top 30 > "$out/breakdown_gpt2.txt" 2>&1
