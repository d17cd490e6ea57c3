#!/usr/bin/env bash
# Forty-seventh session, the one call its device time allowed after nine refused starts: the GPU
# tests that reach LayerNorm's new backward (norms, GPT, HF models, concat), the sweep of it
# against the kernel before it, then GPT-2 trained beside compile+graph, both profiled.
#   mkdir -p variants && git show 6114727:src/coda/nn/layer_norm_grad.py > variants/old_lng.py
#   run(command="bash benchmarks/results/session47/call_a.sh", carry=["variants"], timeout_s=600)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
timeout 170 python -m pytest -v -n 8 -p no:cacheprovider -rf tests/gpu/test_ops_norms.py \
    tests/gpu/test_nn_gpt.py tests/gpu/test_hf_gpu.py tests/gpu/test_concat_gpu.py > "$out/gpu_tests.log" 2>&1
echo "gpu tests rc=$? at ${SECONDS}s"; grep -E "^FAILED|^ERROR|passed|failed" "$out/gpu_tests.log" | cut -c1-250 | head -20
timeout 100 python benchmarks/results/session47/ln_backward_sweep.py --old variants/old_lng.py > "$out/ln_sweep.log" 2>&1
echo "sweep rc=$? at ${SECONDS}s"; grep -v Warning "$out/ln_sweep.log" | head -40
timeout 250 python benchmarks/train.py --models gpt2 --modes compile+graph,coda+graph \
    --steps 30 --rounds 8 --warmup 3 --curve none --profile coda+graph,compile+graph --timeout 240 \
    --json "$out/train_gpt2.json" > "$out/train_gpt2.log" 2>&1
echo "gpt2 rc=$? at ${SECONDS}s"; grep -E "tokens/s|round by round|rror" "$out/train_gpt2.log" | head -8
python benchmarks/breakdown.py "$out/train_gpt2.json" --top 30 > "$out/breakdown_gpt2.txt" 2>&1
grep -A16 "idle after" "$out/breakdown_gpt2.txt" | head -40
