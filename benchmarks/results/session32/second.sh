#!/usr/bin/env bash
# Thirty-second session, second call: the GPU tests that call 1's suite did not reach in its 300 s
# (the models, the embedding), then GPT-2's 200-step curve on math attention for eager, CODA's
# exponential head path and its general path, seeds 0-2 (session31/curve_probe.py).
#   bash benchmarks/results/session32/second.sh   (on a GPU, from the repository root)
export CODA_AUTOTUNE=0 PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
timeout 150 python -m pytest -q -n 8 -p no:cacheprovider --tb=short tests/gpu/test_hf_gpu.py \
  tests/gpu/test_ops_embedding.py tests/gpu/test_nn_gpt.py > "$out/gpu_tests_models.txt" 2>&1
echo "model tests rc=$?"; grep -E "passed|failed|FAILED|Error" "$out/gpu_tests_models.txt" | tail -8
timeout 420 python benchmarks/results/session31/curve_probe.py --seeds 0,1,2 \
  --runs eager,coda_exp,coda_general --json "$out/curves.json" 2>&1 | grep -v -i warn
