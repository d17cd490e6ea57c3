#!/usr/bin/env bash
# Sixty-ninth session, call 2: coda.patch on Gemma. (1) the HF GPU tests of Gemma (bf16 and
# autocast, at Gemma-2B's layer widths), Gemma 2 and 3 (bf16) and of LLaMA and Qwen3, whose layer code the change
# touched, and the gated MLP's pre-norm cases (float16 stores d(gate, up) unscaled); (2) the training benchmark's Gemma (Gemma-2B's layers, 6 of them, vocab 32000,
# 4 x 2048): eager, liger, compile+graph (the fastest peer elsewhere), coda+graph (four runs
# warming up side by side fit an 80 GB GPU), 4 rounds, the eager and coda+graph steps profiled.
#   run(command="cd .snap && bash benchmarks/results/session69/call2.sh", carry=[".snap"], timeout_s=590)
# (the snapshot holds .whl/, liger-kernel's wheel); TESTS_ONLY=1: (1) only, as call 3 was to run
# with little device time left (run(..., timeout_s=330)); K: the tests' -k expression
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
out=${OUT:-/tmp}; LIMIT=${LIMIT:-540}
[[ -n ${TESTS_ONLY:-} ]] || python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD/src:/tmp/site
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee "$out/gpu.txt"
python -c "import transformers, transformers.models.gemma.modeling_gemma as g; print('transformers', \
transformers.__version__, 'scaled embedding class:', hasattr(g, 'GemmaTextScaledWordEmbedding'))"
timeout 260 python -m pytest -v -n 3 -p no:cacheprovider --tb=short tests/gpu/test_hf_gpu.py \
    tests/gpu/test_ops_gated.py -k "${K:-gemma or llama or qwen3 or prenorm}" > "$out/hf_tests.log" 2>&1
echo "tests rc=$? at ${SECONDS}s"; grep -E "PASSED|FAILED|^E |passed|failed" "$out/hf_tests.log" | tail -24
[[ -n ${TESTS_ONLY:-} ]] && exit 0
timeout $((LIMIT - SECONDS)) python benchmarks/train.py --models gemma \
    --modes eager,liger,compile+graph,coda+graph --steps 8 --rounds 4 --warmup 3 \
    --curve none --profile eager,coda+graph --timeout 240 --json "$out/train_gemma.json" \
    > "$out/train_gemma.log" 2>&1
echo "gemma rc=$? at ${SECONDS}s"; grep -E "^\| gemma|round by round|rror" "$out/train_gemma.log" | head -12
