#!/usr/bin/env bash
# Sixty-eighth session, call 3: (1) the side-by-side replay test with its scratch assertion, on
# this build and on the kernel.py before the change (OLD_KERNEL: it should fail there); (2) the
# power probe: GPT-2's forward GEMM shapes, each kernel in a burst and held at the power cap.
#   run(command="OLD_KERNEL=... bash benchmarks/results/session68/call3.sh", timeout_s=560)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee "$out/gpu.txt"
timeout 60 python -m pytest -q -p no:cacheprovider --tb=line tests/gpu/test_launch_gpu.py -k two_graphs 2>&1 | tail -3
if [[ -n ${OLD_KERNEL:-} ]]; then
    rm -rf /tmp/oldsrc && cp -r src /tmp/oldsrc && cp "$OLD_KERNEL" /tmp/oldsrc/coda/codegen/kernel.py
    PYTHONPATH=/tmp/oldsrc timeout 60 python -m pytest -q -p no:cacheprovider --tb=line \
        tests/gpu/test_launch_gpu.py -k two_graphs 2>&1 | tail -4
fi
echo "tests at ${SECONDS}s"
timeout 420 python benchmarks/results/session68/power_probe.py --json "$out/power_probe.json" \
    2>&1 | tee "$out/power_probe.log" | grep -v Warning
echo "probe rc=$? at ${SECONDS}s"
