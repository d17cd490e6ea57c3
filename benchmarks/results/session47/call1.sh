#!/usr/bin/env bash
# Forty-seventh session, call 1: the whole GPU suite on main (the HF model tests now take turns,
# after call 2 of the 46th session ran them out of memory twelve at a time), verbose so that a
# timeout still names what ran; then LayerNorm's backward as landed against the kernel before it.
#   mkdir -p variants && git show 6114727:src/coda/nn/layer_norm_grad.py > variants/old_lng.py
#   run(command="bash benchmarks/results/session47/call1.sh", carry=["variants"], timeout_s=600)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
timeout 420 python -m pytest -v -n 8 -p no:cacheprovider -rf tests/gpu tests/integrations/test_compile_gpu.py \
    tests/examples > "$out/gpu_tests.log" 2>&1
echo "gpu tests rc=$? at ${SECONDS}s"; grep -E "^FAILED|^ERROR|passed|failed" "$out/gpu_tests.log" | cut -c1-250 | head -20
timeout 120 python benchmarks/results/session47/ln_backward_sweep.py --old variants/old_lng.py > "$out/ln_sweep.log" 2>&1
echo "sweep rc=$? at ${SECONDS}s"; grep -v Warning "$out/ln_sweep.log" | head -60
