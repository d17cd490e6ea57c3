#!/usr/bin/env bash
# Forty-ninth session, fourth call: the bf16 GPU tests of the norms (coda.nn.rms_norm new), gated
# ops, HF models and compiled ops on this tree, then the whole micro suite as run_all.sh's ops
# stage runs it (every op fwd+bwd against the peers, replayed from CUDA graphs).
#   run(command="bash benchmarks/results/session49/call4.sh", carry=[".whl"], timeout_s=590)
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader
PYTHONPATH=$PWD/src:$PYTHONPATH timeout 230 python -m pytest -q -x -p no:cacheprovider tests/gpu/test_ops_norms.py \
    tests/gpu/test_ops_gated.py tests/gpu/test_hf_gpu.py tests/integrations/test_compile_gpu.py \
    > "$out/gpu_tests.log" 2>&1
echo "gpu tests rc=$? at ${SECONDS}s"; tail -4 "$out/gpu_tests.log" | cut -c1-200
timeout $((580 - SECONDS)) python benchmarks/micro.py --max-autotune '' --json "$out/micro.json" > "$out/micro.log" 2>&1
echo "micro rc=$? at ${SECONDS}s"; grep -A24 "replayed from CUDA" "$out/micro.log" | cut -c1-130
