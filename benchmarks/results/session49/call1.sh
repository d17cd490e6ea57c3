#!/usr/bin/env bash
# Forty-ninth session, first call: RMSNorm's backward in one pass (rms_norm_linear, and qkv_rope
# with the norm folded in, LLaMA's q/k/v) -- bf16 GPU tests of the norms and the gated ops, then
# the micro suite's rms_norm_linear on this tree against the fold's backward (variants/base: the
# tree before the change) and against the peers.
#   mkdir -p variants/base && git archive <base commit> src benchmarks/*.py | tar -x -C variants/base
#   run(command="bash benchmarks/results/session49/call1.sh", carry=["variants", ".whl"], timeout_s=540)
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader
PYTHONPATH=$PWD/src:$PYTHONPATH timeout 200 python -m pytest -q -x -p no:cacheprovider \
    tests/gpu/test_ops_norms.py tests/gpu/test_ops_gated.py > "$out/gpu_tests.log" 2>&1
echo "gpu tests rc=$? at ${SECONDS}s"; tail -4 "$out/gpu_tests.log" | cut -c1-200
timeout 90 python variants/base/benchmarks/micro.py --ops rms_norm_linear --no-compile --no-liger \
    --json "$out/micro_base.json" > "$out/micro_base.log" 2>&1
echo "micro base rc=$? at ${SECONDS}s"; grep -A8 "replayed from CUDA" "$out/micro_base.log" | cut -c1-160
timeout 200 python benchmarks/micro.py --ops rms_norm_linear,layer_norm_linear --max-autotune '' \
    --json "$out/micro_new.json" > "$out/micro_new.log" 2>&1
echo "micro new rc=$? at ${SECONDS}s"; grep -A14 "replayed from CUDA" "$out/micro_new.log" | cut -c1-160
