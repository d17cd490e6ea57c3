#!/usr/bin/env bash
# Sixty-ninth session, call 3 (little device time left after refused starts): call 2's tests
# only: the HF GPU tests of Gemma 1-3 (bf16; Gemma's autocast too), LLaMA and Qwen3, and the
# gated MLP's pre-norm cases (float16 with rows near 300 among them).
#   run(command="cd .snap && bash benchmarks/results/session69/call3.sh", carry=[".snap"], timeout_s=330)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee "$out/gpu.txt"
python -c "import transformers, transformers.models.gemma.modeling_gemma as g; print('transformers', \
transformers.__version__, 'scaled embedding class:', hasattr(g, 'GemmaTextScaledWordEmbedding'))"
timeout 290 python -m pytest -v -n 3 -p no:cacheprovider --tb=short tests/gpu/test_hf_gpu.py \
    tests/gpu/test_ops_gated.py -k "gemma or llama or qwen3 or prenorm" > "$out/hf_tests.log" 2>&1
echo "tests rc=$? at ${SECONDS}s"; grep -E "PASSED|FAILED|^E |passed|failed" "$out/hf_tests.log" | tail -24
