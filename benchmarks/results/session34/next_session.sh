#!/usr/bin/env bash
# Left by the thirty-fourth session: two branches, each built and tested on the CPU (interpreter,
# offline sm_90 compiles), neither run on the GPU in its present form.
#   a-col-sums    `a_col_sums=True` (a GEMM sums its A's columns from its K loop) and the bias
#                 gradients of linear, mlp's fc2, out_proj_residual and layer_norm_linear taken
#                 from their dx GEMMs instead of 48 column-sum maps a GPT-2 step (644 us):
#                 benchmarks/results/session34/third/README.md for its first run (right in the
#                 ping-pong kernel but GPT-2 11% slower; wrong in the persistent one), since fixed
#                 as far as offline compiles can tell.
#   fold-ln-sums  LayerNorm's fold sums u = Σ_k W' in its own map (round_bf16 of W' as stored):
#                 two kernels fewer in every layer_norm_linear forward (GPT-2's ln_1, 12 a step).
# One device call for both (about 5 minutes), from a branch that merges them:
#   git checkout -b s35-try a-col-sums && git merge --no-edit fold-ln-sums
#   bash benchmarks/results/session34/next_session.sh
# then merge into main what passed and what GPT-2 / BERT measure faster (583.5k-586.9k and
# 715.6k tokens/s without either, calls 1, 3 and 6 of the thirty-fourth session).
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
out=${OUT:-/tmp}
timeout 150 python -m pytest -q -n 8 -p no:cacheprovider --tb=short tests/gpu/test_concat_gpu.py \
  tests/gpu/test_ops_linear.py tests/gpu/test_ops_norms.py tests/gpu/test_hf_gpu.py > "$out/gpu_tests.txt" 2>&1
echo "tests rc=$?"; grep -E "passed|failed|FAILED|Error" "$out/gpu_tests.txt" | tail -12
if [ -f benchmarks/results/session35/a_col_sums_probe.py ]; then
  timeout 60 python benchmarks/results/session35/a_col_sums_probe.py > "$out/probe.txt" 2>&1
  echo "probe rc=$?"; cat "$out/probe.txt"
fi
timeout 150 python benchmarks/train.py --models gpt2,bert --modes coda+graph --steps 30 --warmup 2 --curve none \
  --profile none --timeout 140 --json "$out/train.json" > "$out/train.log" 2>&1
echo "train rc=$?"; grep -E "tokens/s|rror" "$out/train.log" | head -4
