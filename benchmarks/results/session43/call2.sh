#!/usr/bin/env bash
# Forty-third session, call 2: LayerNorm's one-pass backward sums the columns of the dx it
# writes, and the op before the norm on the residual stream (GPT-2's fc2 and out projection)
# takes them as its bias gradient (no A column sums in dh's GEMM, the out projection's dx by
# cuBLAS): the whole GPU suite, then GPT-2 against compile+graph in 10 interleaved rounds
# (ROUNDS, TRAIN_LIMIT: next_session.sh runs it with 15 rounds).
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
timeout 290 python -m pytest -q -n 12 -p no:cacheprovider -rf tests/gpu tests/integrations/test_compile_gpu.py \
    > "$out/gpu_tests.log" 2>&1
echo "gpu tests rc=$?"; grep -E "^FAILED|passed|failed" "$out/gpu_tests.log" | cut -c1-250 | head -20
limit=${TRAIN_LIMIT:-230}
timeout "$limit" python benchmarks/train.py --models gpt2 --modes compile+graph,coda+graph --steps 30 \
  --rounds "${ROUNDS:-10}" --warmup 3 --curve none --profile none --timeout $((limit - 10)) --json "$out/train.json" > "$out/train.log" 2>&1
echo "train rc=$?"; grep -E "tokens/s|round by round|rror" "$out/train.log" | head -8
