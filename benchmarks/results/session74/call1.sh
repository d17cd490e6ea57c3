#!/usr/bin/env bash
# Seventy-fourth session, call 1: (1) what summing a producer's output as stored costs
# (rounding_cost.py); (2) the GPU tests of the 73rd session's later fixes and of this session's
# (launch checks, the ops whose epilogues hand a norm its sums); (3) GPT-2 against compile+graph
# with the rounds' order rotating, this build and the session's base (`--tree base=`), 8 rounds;
# (4) on an H200, issue 8's table with the time left.
#   run(command="cd .snap && bash benchmarks/results/session74/call1.sh", kind="nvidia-h200",
#       carry=[".snap"], timeout_s=595)   (.snap/base: `git archive c1ef924 src | tar -x -C .snap/base`)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee "$out/gpu.txt"
timeout 120 python benchmarks/results/session74/rounding_cost.py "$out/rounding_cost.json" > "$out/rounding_cost.log" 2>&1
echo "rounding cost rc=$? at ${SECONDS}s"; cat "$out/rounding_cost.log" | tail -6
timeout 200 python -m pytest -q -n 4 -p no:cacheprovider --tb=short tests/gpu/test_launch_gpu.py \
    tests/gpu/test_triton_gpu.py tests/gpu/test_concat_gpu.py tests/gpu/test_ops_norms.py tests/gpu/test_ops_gated.py \
    > "$out/tests.log" 2>&1
echo "tests rc=$? at ${SECONDS}s"; grep -E "FAILED|ERROR" "$out/tests.log" | head; tail -1 "$out/tests.log"
timeout 190 python benchmarks/train.py --models gpt2 --modes compile+graph,coda+graph --pad-mm always \
    --tree base=$PWD/base/src --steps 15 --rounds 8 --warmup 3 --curve none --profile none --timeout 180 \
    --json "$out/train_gpt2.json" > "$out/train_gpt2.log" 2>&1
echo "gpt2 rc=$? at ${SECONDS}s"; grep -E "tokens/s|round by round|rror" "$out/train_gpt2.log" | head -8
if grep -q H200 "$out/gpu.txt" && [ $SECONDS -lt 400 ]; then
    timeout $((585 - SECONDS)) python benchmarks/gemm.py --rounds 3 --no-compile \
        --cases plain,bias_gelu,bias_gelu_dropout_residual,residual_rowsumsq,rowscale_swiglu,dgelu_bias_grad \
        --json "$out/gemm_fastpath.json" > "$out/gemm_fastpath.log" 2>&1
    echo "gemm rc=$? at ${SECONDS}s"; grep "over plain, paired" "$out/gemm_fastpath.log" | head -42
fi
