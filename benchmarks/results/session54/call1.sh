#!/usr/bin/env bash
# The fifty-fourth session's first call: the 53rd's call 6 (dx's GEMM leaving the long-K bias
# gradient to a column-sum map: layer_norm_linear's kernels at LLaMA-7B size), then run_all.sh's
# ops stage (launch counts, cross-entropy memory, the whole micro suite with Liger) on the
# current build. Call 2 runs its training stage.
#   run(command="bash benchmarks/results/session54/call1.sh", carry=[".whl"], timeout_s=598)
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader
PYTHONPATH=$PWD/src timeout 80 python benchmarks/results/session53/norm_linear_kernels.py \
    --cases layer_norm_linear:llama7b > "$out/kernels.log" 2>&1
echo "kernels rc=$? at ${SECONDS}s"; grep -v -i warn "$out/kernels.log" | grep -A9 "^== " | cut -c1-120 | head -40
PYTHONPATH=$PWD/src timeout 60 python benchmarks/results/session54/qkv_rows_probe.py 2>&1 | grep -v -i warn | tail -4
PYTHONPATH=/tmp/site bash benchmarks/run_all.sh ops > "$out/run_all_ops.log" 2>&1
echo "run_all ops rc=$? at ${SECONDS}s"; cat benchmarks/results/status.txt | tail -5
cp benchmarks/results/{launch_counts,cross_entropy,micro}.json benchmarks/results/*.log "$out/" 2>/dev/null
grep -A24 "replayed from CUDA" benchmarks/results/micro.log | cut -c1-130
