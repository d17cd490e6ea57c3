#!/usr/bin/env bash
# Left by the forty-second session for the next one: the first GPU run of stream-K (an opt-in
# Config(stream_k=True) of the Triton kernel; interpreter-tested and compiled for sm_90 here,
# never run on a GPU). If a launch hangs (a run waiting on a partial that never comes), the
# timeouts below end it: then read the READY flags' protocol in mainloops.HOPPER first.
#   run(command="bash benchmarks/results/session42/next_session.sh", timeout_s=600)
# Then: if stream-K beats cuBLAS at the weight gradients (+ its splitKreduce), apply
# stream_k_default.patch (the heuristic takes stream-K for fewer 128x128 tiles than SMs at
# K >= 4096, which gives ln_1's dW and ln_dw to it, and ops.common.weight_grad sends such
# GEMMs to CODA instead of cuBLAS; fill in its FILL IN lines with the probe's numbers, pick the
# faster tile of the two), run the GPU suite and time GPT-2 against compile+graph.
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
timeout 120 python -m pytest -q -x -rf -p no:cacheprovider tests/gpu/test_triton_gpu.py -k stream_k \
    > "$out/stream_k_tests.log" 2>&1
echo "stream-K tests rc=$?"; grep -E "^FAILED|passed|failed" "$out/stream_k_tests.log" | cut -c1-250 | head
timeout 200 python benchmarks/results/session42/stream_k_probe.py > "$out/stream_k_probe.log" 2>&1
echo "probe rc=$?"; tail -25 "$out/stream_k_probe.log"
# GPT-2's dh took 165.9 µs in call 4 (142.7 in the 41st session) with both column-sum patches;
# only the epilogue's was reverted, and dh also sums A's columns (db2) in its K loop: dh and the
# two other launches that sum A's columns, on main (A's sums on the tensor cores) and with
# cuda_core_sums.patch (on the CUDA cores, as the 41st session). Keep the faster per launch.
cases=linear_gelu_grad_16384x3072x768,plain_16384x768x2304,plain_16384x768x768
timeout 75 python benchmarks/kernel_configs.py gpt2 --configs none-but-the-heuristic --cases $cases \
    --json "$out/launches_main.json" > "$out/launches_main.log" 2>&1
echo "launches (main) rc=$?"; python benchmarks/results/session42/launches_table.py "$out/launches_main.json"
rm -rf /tmp/cuda_sums && mkdir /tmp/cuda_sums && cp -r src benchmarks /tmp/cuda_sums/ \
    && (cd /tmp/cuda_sums && git apply benchmarks/results/session42/cuda_core_sums.patch)
PYTHONPATH=/tmp/cuda_sums/src timeout 75 python /tmp/cuda_sums/benchmarks/kernel_configs.py gpt2 \
    --configs none-but-the-heuristic --cases $cases --json "$out/launches_cuda_sums.json" > "$out/launches_cuda.log" 2>&1
echo "launches (CUDA-core sums) rc=$?"; python benchmarks/results/session42/launches_table.py "$out/launches_cuda_sums.json"
# The Triton kernel's loops now share k_block_operands and tile_epilogue with stream-K (ptxas:
# registers moved by -18..+5 a kernel, no spills): its default launches at K >= 2048 against
# the forty-second session's call 4 (plain 1114 and 852 µs, bias+GELU 1.05 and 1.04 its plain).
timeout 100 python benchmarks/gemm.py --no-compile --rounds 3 --cases plain,bias_gelu \
    --shapes 8192x11008x4096,16384x8192x2048 --json "$out/gemm_triton.json" > "$out/gemm_triton.log" 2>&1
echo "gemm rc=$?"; grep -E "plain  |over plain" "$out/gemm_triton.log" | cut -c1-150
