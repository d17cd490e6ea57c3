#!/usr/bin/env bash
# Forty-first session, call 6: the c_attn bias gradient from the weight gradient's GEMM (a column
# of ones beside LayerNorm's output): the GPU tests of the ops and HF models, ones_probe.py (that
# form against the K-loop sums in one process), GPT-2 against compile+graph in interleaved rounds.
#   run(command="bash benchmarks/results/session41/call6.sh", timeout_s=560)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
timeout 120 python -m pytest -q -n 12 -p no:cacheprovider tests/gpu/test_concat_gpu.py tests/gpu/test_ops_linear.py \
    tests/gpu/test_ops_norms.py tests/gpu/test_ops_gated.py tests/gpu/test_hf_gpu.py tests/gpu/test_nn_gpt.py \
    > "$out/gpu_tests.log" 2>&1
echo "tests rc=$?"; tail -2 "$out/gpu_tests.log"
timeout 150 python benchmarks/results/session41/ones_probe.py > "$out/ones_probe.log" 2>&1
echo "probe rc=$?"; grep -E "errors|µs a replay|tokens/s|coda_gemm|layer_norm|finish" "$out/ones_probe.log" | cut -c1-160
timeout 180 python benchmarks/train.py --models gpt2 --modes compile+graph,coda+graph --steps 30 --rounds 10 \
  --warmup 3 --curve none --profile none --timeout 170 --json "$out/train.json" > "$out/train.log" 2>&1
echo "train rc=$?"; grep -E "tokens/s|round by round|rror" "$out/train.log" | head -8
