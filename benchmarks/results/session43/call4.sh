#!/usr/bin/env bash
# Forty-third session, call 4: the norms' noted column sums stored in the norm's parameter dtype
# (call 3's profile showed 24 casts of the float32 sums to the biases' bf16): GPU tests of the
# ops, GPT-2, BERT and HF models, the A/B of notes_probe.py, and GPT-2 against compile+graph.
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
timeout 130 python -m pytest -q -n 12 -p no:cacheprovider -rf tests/gpu/test_hf_gpu.py tests/gpu/test_ops_norms.py \
    tests/gpu/test_ops_linear.py tests/gpu/test_nn_gpt.py > "$out/gpu_tests.log" 2>&1
echo "gpu tests rc=$?"; grep -E "^FAILED|passed|failed" "$out/gpu_tests.log" | cut -c1-250 | head -20
timeout 130 python benchmarks/results/session43/notes_probe.py 2>&1 | grep -v -i warn > "$out/notes_probe.log"
echo "probe rc=$?"; grep -E "GPT-2|copy|coda_gemm_plain|TNT|gelu_grad|finish|total" "$out/notes_probe.log" | cut -c1-150
timeout 230 python benchmarks/train.py --models gpt2 --modes compile+graph,coda+graph --steps 30 --rounds 10 \
  --warmup 3 --curve none --profile none --timeout 220 --json "$out/train.json" > "$out/train.log" 2>&1
echo "train rc=$?"; grep -E "tokens/s|round by round|rror" "$out/train.log" | head -8
