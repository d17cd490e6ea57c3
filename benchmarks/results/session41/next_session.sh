#!/usr/bin/env bash
# Left by the forty-first session for the next one: A's column sums (`a_col_sums=True`) on the
# tensor cores, A_tileᵀ @ ones, a [64, 8] MMA issued before each summed K block's own
# (sums_mma.patch; compiled offline for sm_90: no spills but in LayerNorm's dxhat GEMM, 212 bytes,
# a rarely taken launch; the plain GEMM's kernel 1936 SASS instructions against 2224 with the
# CUDA cores' sums and 1528 without sums). Not run on a GPU yet: apply it first, here,
#   git apply benchmarks/results/session41/sums_mma.patch
# then run(command="bash benchmarks/results/session41/next_session.sh", timeout_s=600):
# the GPU tests of every op that sums A's columns (and the HF models), sums_probe.py against
# calls 3 and 5 (GPT-2's ln_1 dy @ w with the sums 105.2-108.5 us, without 88.4-89.6), Nsight
# Compute on the sums launch, GPT-2 against compile+graph. If the tests pass and the step is
# faster, keep it and run the whole GPU suite; else `git checkout` the two files.
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
grep -q k_step_summing src/coda/codegen/mainloops.py || { echo "apply sums_mma.patch first"; exit 1; }
timeout 150 python -m pytest -q -n 12 -p no:cacheprovider tests/gpu/test_concat_gpu.py tests/gpu/test_ops_linear.py \
    tests/gpu/test_ops_norms.py tests/gpu/test_ops_gated.py tests/gpu/test_hf_gpu.py tests/gpu/test_nn_gpt.py \
    > "$out/gpu_tests.log" 2>&1
echo "tests rc=$?"; tail -2 "$out/gpu_tests.log"
timeout 90 python benchmarks/results/session41/sums_probe.py > "$out/sums_probe.log" 2>&1
echo "probe rc=$?"; cut -c1-60 "$out/sums_probe.log" | grep -E "sums=|cuBLAS|x768"
metrics=gpu__time_duration.sum,smsp__inst_executed.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed
timeout 60 ncu --clock-control none -k regex:coda_gemm --launch-skip 2 --launch-count 1 --metrics "$metrics" \
    --csv python benchmarks/results/session41/sums_ncu.py 1 > "$out/ncu_sums1.csv" 2>&1
echo "ncu rc=$?"; grep -E "gpu__time|hmma|inst_executed" "$out/ncu_sums1.csv" | cut -d, -f13-16
timeout 200 python benchmarks/train.py --models gpt2 --modes compile+graph,coda+graph --steps 30 --rounds 10 \
  --warmup 3 --curve none --profile none --timeout 190 --json "$out/train.json" > "$out/train.log" 2>&1
echo "train rc=$?"; grep -E "tokens/s|round by round|rror" "$out/train.log" | head -8
