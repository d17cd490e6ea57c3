#!/usr/bin/env bash
# Forty-first session, call 5: A's column sums read with the lanes down the rows (no bank
# conflicts under the 128-byte swizzle, by the reading of call 4): Nsight Compute on the sums
# launch again, sums_probe.py, the GPU tests of the ops that sum A's columns and of the HF models,
# then GPT-2 against compile+graph in interleaved rounds.
#   run(command="bash benchmarks/results/session41/call5.sh", timeout_s=600)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
metrics=gpu__time_duration.sum,smsp__inst_executed.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed,\
l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,\
smsp__sass_inst_executed_op_shared_ld.sum
timeout 60 ncu --clock-control none -k regex:coda_gemm --launch-skip 2 --launch-count 1 --metrics "$metrics" \
    --csv python benchmarks/results/session41/sums_ncu.py 1 > "$out/ncu_sums1.csv" 2>&1
echo "ncu rc=$?"; grep -E "gpu__time|bank|wavefronts|shared_ld|hmma|inst_executed" "$out/ncu_sums1.csv" | cut -d, -f13-16
timeout 90 python benchmarks/results/session41/sums_probe.py > "$out/sums_probe.log" 2>&1
echo "probe rc=$?"; cut -c1-60 "$out/sums_probe.log" | grep -E "sums=|cuBLAS|x768"
timeout 150 python -m pytest -q -n 12 -p no:cacheprovider tests/gpu/test_concat_gpu.py tests/gpu/test_ops_linear.py \
    tests/gpu/test_ops_norms.py tests/gpu/test_ops_gated.py tests/gpu/test_hf_gpu.py > "$out/gpu_tests.log" 2>&1
echo "tests rc=$?"; tail -2 "$out/gpu_tests.log"
timeout 200 python benchmarks/train.py --models gpt2 --modes compile+graph,coda+graph --steps 30 --rounds 10 \
  --warmup 3 --curve none --profile none --timeout 190 --json "$out/train.json" > "$out/train.log" 2>&1
echo "train rc=$?"; grep -E "tokens/s|round by round|rror" "$out/train.log" | head -8
