#!/usr/bin/env bash
# Left by the thirty-sixth session for the next one's first device call (about 3 minutes warm):
# the GPU tests of the LM head + cross-entropy (its targets outside the vocabulary now poison the
# loss, five more small kernels a forward, not yet run on a GPU: docs/ops.md),
# GPT-2's LayerNorm maps in a few tile configurations beside map_config's choice (layer_norm_sums
# ran at about 2 TB/s in the 35th session's profile: 25.2 us for 50 MB read, 13 a step), then
# GPT-2 `coda+graph` beside `compile+graph` with the peer's step profiled (which of its two
# compiles it got: docs/benchmarks.md, thirty-sixth session).
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
timeout 200 python -m pytest -q -n 8 -p no:cacheprovider --tb=short tests/gpu/test_ops_cross_entropy.py \
  tests/gpu/test_hf_gpu.py > "$out/gpu_tests.txt" 2>&1
echo "tests rc=$?"; grep -E "passed|failed|FAILED|Error" "$out/gpu_tests.txt" | tail -8
timeout 120 python benchmarks/results/session36/map_probe.py > "$out/map_probe.txt" 2>&1
echo "map probe rc=$?"; cat "$out/map_probe.txt"
timeout 200 python benchmarks/train.py --models gpt2 --modes compile+graph,coda+graph --steps 30 --warmup 3 \
  --curve none --profile compile+graph --timeout 190 --json "$out/gpt2.json" > "$out/gpt2.log" 2>&1
echo "train rc=$?"; grep -E "tokens/s|rror" "$out/gpt2.log" | head -4
