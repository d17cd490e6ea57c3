#!/usr/bin/env bash
# Branch a-col-sums (thirty-fourth session), for the next device session, one call (~5 min):
#   git checkout a-col-sums && bash benchmarks/results/session35/next_session.sh
# The 34th session's call 7 ran the branch at 3eb19ed: the ping-pong kernel's sums right but
# GPT-2 at 521.6k tokens/s (-11%: the sums' reduction across the warpgroup's warps, through
# shared memory and barriers, in the K loop), the persistent kernel's output wrong (a second
# reader of its TMA-loaded A tile). Since then: ping-pong sums warp by warp (offline PTX: no
# bar.sync added), the Triton kernels' sums from a second read through pointers. Superseded by
# benchmarks/results/session34/next_session.sh on main (this branch merged with fold-ln-sums);
# this script is the same call for this branch alone. It runs: the GPU tests of the affected ops, the
# three GEMMs timed with and without the sums, GPT-2 and BERT coda+graph (583.5k-586.9k and
# 715.6k without the change, 34th calls 1, 3, 6).
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
out=${OUT:-/tmp}
timeout 150 python -m pytest -q -n 8 -p no:cacheprovider --tb=short tests/gpu/test_concat_gpu.py \
  tests/gpu/test_ops_linear.py tests/gpu/test_ops_norms.py tests/gpu/test_hf_gpu.py > "$out/gpu_tests.txt" 2>&1
echo "tests rc=$?"; grep -E "passed|failed|FAILED|Error" "$out/gpu_tests.txt" | tail -12
timeout 60 python benchmarks/results/session35/a_col_sums_probe.py > "$out/probe.txt" 2>&1
echo "probe rc=$?"; cat "$out/probe.txt"
timeout 150 python benchmarks/train.py --models gpt2,bert --modes coda+graph --steps 30 --warmup 2 --curve none \
  --profile none --timeout 140 --json "$out/train.json" > "$out/train.log" 2>&1
echo "train rc=$?"; grep -E "tokens/s|rror" "$out/train.log" | head -4
