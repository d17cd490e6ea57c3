#!/usr/bin/env bash
# Seventy-first session, call 2: the GPU tests that reach round_bf16 (now the GPU's cvt) and
# gelu_grad (its term reordered), beside the HF models' GPU tests (coda.patch's row sums and
# hooks), on this build; then builds.py's timings of the build before (old/, the snapshot's copy
# of commit f38a84d) and this one, alternately, twice each.
#   run(command="cd .snap && bash benchmarks/results/session71/call2.sh", carry=[".snap"], timeout_s=595)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee "$out/gpu.txt"
PYTHONPATH=$PWD/src timeout 280 python -m pytest -v -n 8 -p no:cacheprovider --tb=short \
    tests/gpu/test_triton_gpu.py -k "extreme or nan or dgelu or round or bias_gelu" \
    tests/gpu/test_ops_cross_entropy.py tests/gpu/test_ops_linear.py tests/gpu/test_ops_gated.py \
    tests/gpu/test_nn_gpt.py > "$out/gpu_tests.log" 2>&1 &
PYTHONPATH=$PWD/src timeout 280 python -m pytest -v -n 4 -p no:cacheprovider --tb=short \
    tests/gpu/test_hf_gpu.py > "$out/hf_tests.log" 2>&1 &
wait
for log in gpu_tests hf_tests; do
    echo "$log at ${SECONDS}s: $(grep -c PASSED "$out/$log.log") passed, $(grep -c FAILED "$out/$log.log") failed"
    grep -E "FAILED|^E |passed|failed" "$out/$log.log" | tail -12
done
for round in 1 2; do
    for build in old new; do
        tree=$PWD; [ $build = old ] && tree=$PWD/old
        PYTHONPATH=$tree/src timeout $((585 - SECONDS)) python benchmarks/results/session71/builds.py \
            "$tree" "$build" 2>&1 | tee -a "$out/builds.jsonl" | tail -3
        echo "$build done at ${SECONDS}s"
    done
done
