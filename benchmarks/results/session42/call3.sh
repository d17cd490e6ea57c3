#!/usr/bin/env bash
# Forty-second session, call 3, on the commit with the column sums on the tensor cores: the whole
# GPU suite; issue 8's (e) against the plain GEMM at the seven shapes (5 rounds, ABBA pairs);
# GPT-2 against compile+graph (10 interleaved rounds).
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
timeout 250 python -m pytest -q -n 12 -rf -p no:cacheprovider tests/gpu tests/integrations/test_compile_gpu.py \
    > "$out/gpu_suite.log" 2>&1
echo "suite rc=$?"; grep -E "^FAILED|passed|failed" "$out/gpu_suite.log" | cut -c1-250 | head -12
timeout 130 python benchmarks/gemm.py --no-compile --rounds 5 --cases plain,dgelu_bias_grad \
    --json "$out/gemm_e.json" > "$out/gemm_e.log" 2>&1
echo "gemm rc=$?"; grep -E "over plain|rror" "$out/gemm_e.log" | cut -c1-120
timeout 190 python benchmarks/train.py --models gpt2 --modes compile+graph,coda+graph --steps 30 --rounds 10 \
  --warmup 3 --curve none --profile none --timeout 180 --json "$out/train.json" > "$out/train.log" 2>&1
echo "train rc=$?"; grep -E "tokens/s|round by round|rror" "$out/train.log" | head -8
