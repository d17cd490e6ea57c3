#!/usr/bin/env bash
# Forty-ninth session, third call: (1) rms_norm_linear without sumsq as RMSNorm's one-pass forward
# then `linear` (variants/fwd: this tree plus that route, a measurement probe) against the fold's
# forward (this tree), micro suite fwd+bwd, each twice in alternating processes; (2) the bf16 GPU
# tests of the norms, the gated ops and the HF models on this tree (RMSNorm's one-pass backward
# between cuBLAS GEMMs).
#   run(command="bash benchmarks/results/session49/call3.sh", carry=["variants"], timeout_s=560)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader
for round in 1 2; do
    for tree in main fwd; do
        script=benchmarks/micro.py; [ $tree = fwd ] && script=variants/fwd/benchmarks/micro.py
        timeout 60 python $script --ops rms_norm_linear --no-compile --no-liger \
            --json "$out/micro_${tree}_$round.json" > "$out/micro_${tree}_$round.log" 2>&1
        echo "micro $tree $round rc=$? at ${SECONDS}s"
        grep -A4 "replayed from CUDA" "$out/micro_${tree}_$round.log" | cut -c1-120
        grep "coda .*fwd " "$out/micro_${tree}_$round.log" | cut -c1-120
    done
done
PYTHONPATH=$PWD/src timeout $((550 - SECONDS)) python -m pytest -q -x -p no:cacheprovider \
    tests/gpu/test_ops_norms.py tests/gpu/test_ops_gated.py tests/gpu/test_hf_gpu.py > "$out/gpu_tests.log" 2>&1
echo "gpu tests rc=$? at ${SECONDS}s"; tail -4 "$out/gpu_tests.log" | cut -c1-200
