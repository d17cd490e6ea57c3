#!/usr/bin/env bash
# Call 3 of the thirty-third session, after the exponential head path became the default:
# the cross-entropy and model GPU tests; GPT-2 against torch.compile (coda+graph now takes the
# exponential path); GPT-2's 200-step curves on seeds 0 and 5 for eager with a float32 LM head
# and CODA (eager's and both paths' earlier 200-step runs: session32/second, third; eager's
# losses are bit-identical across machines: session33/second against session32/second).
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
out=${OUT:-/tmp}
timeout 150 python -m pytest -q -n 8 -p no:cacheprovider --tb=short tests/gpu/test_ops_cross_entropy.py \
  tests/gpu/test_hf_gpu.py tests/gpu/test_ops_embedding.py > "$out/gpu_tests.txt" 2>&1
echo "gpu tests rc=$?"; tail -3 "$out/gpu_tests.txt"
timeout 200 python benchmarks/train.py --models gpt2 --modes compile,coda+graph --steps 30 --warmup 2 \
  --curve none --profile none --timeout 190 --json "$out/gpt2.json" > "$out/gpt2.log" 2>&1
echo "gpt2 rc=$?"; grep -E "tokens/s" "$out/gpt2.log"
timeout 230 python benchmarks/results/session31/curve_probe.py --seeds 0,5 --runs eager_f32head,coda_exp \
  --json "$out/curves.json" 2>&1 | grep -v -i warn
