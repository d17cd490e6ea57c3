#!/usr/bin/env bash
# Fortieth session, call 7: the norms' one-pass forward (ln2_probe.py: out projection + ln_2 with
# the producer's sums or the norm's own one pass; numerics), the GPU tests of the norms and the
# models, and GPT-2 against compile+graph in interleaved rounds on main with both one-pass changes.
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
timeout 100 python benchmarks/results/session40/ln2_probe.py > "$out/ln2_probe.log" 2>&1
echo "probe rc=$?"; grep -v Warn "$out/ln2_probe.log" | tail -6
timeout 150 python -m pytest -q -x -n 8 -p no:cacheprovider tests/gpu/test_ops_norms.py tests/gpu/test_hf_gpu.py \
    tests/gpu/test_nn_gpt.py > "$out/gpu_tests.log" 2>&1
echo "tests rc=$?"; tail -3 "$out/gpu_tests.log"
timeout 230 python benchmarks/train.py --models gpt2 --modes compile+graph,coda+graph --steps 30 --rounds 10 \
  --warmup 3 --curve none --profile coda+graph --timeout 200 --json "$out/gpt2.json" > "$out/gpt2.log" 2>&1
echo "gpt2 rc=$?"; grep -E "tokens/s|round by round|rror" "$out/gpt2.log" | head -8
