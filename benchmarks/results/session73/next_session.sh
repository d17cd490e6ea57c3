#!/usr/bin/env bash
# For the next session's first call (the seventy-third session's device time ran out):
#   (1) the GPU tests of what changed after its call 2: launch checks (out= only a tile operand
#       itself, the 32-bit offset limit, B = None, an integer out=), Partials in float32 on the
#       reference, the interpreter's launch lock (a nullcontext on the GPU), a fake's dtypes;
#   (2) on an H200: GPT-2 against compile+graph with the rounds' order rotating (train.py's
#       `first_rounds`: each run takes each place equally often; the 73rd session found a run's
#       place worth 0.9% on an H100), 8 rounds, then issue 8's table (session70/next_session.sh
#       without its GPT-2 part); elsewhere the same GPT-2 reading and the HF GPU tests.
#   run(command="cd .snap && bash benchmarks/results/session73/next_session.sh", kind="nvidia-h200",
#       carry=[".snap"], timeout_s=595)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee "$out/gpu.txt"
timeout 200 python -m pytest -q -n 4 -p no:cacheprovider --tb=short tests/gpu/test_launch_gpu.py \
    tests/gpu/test_triton_gpu.py tests/gpu/test_concat_gpu.py > "$out/launch_tests.log" 2>&1
echo "launch tests rc=$? at ${SECONDS}s"; grep -E "FAILED|ERROR" "$out/launch_tests.log" | head; tail -1 "$out/launch_tests.log"
timeout 130 python benchmarks/train.py --models gpt2 --modes compile+graph,coda+graph --pad-mm always \
    --steps 15 --rounds 8 --warmup 3 --curve none --profile none --timeout 120 \
    --json "$out/train_gpt2.json" > "$out/train_gpt2.log" 2>&1
echo "gpt2 rc=$? at ${SECONDS}s"; grep -E "tokens/s|round by round|rror" "$out/train_gpt2.log" | head -6
if grep -q H200 "$out/gpu.txt"; then
    timeout $((585 - SECONDS)) python benchmarks/gemm.py --rounds 5 --no-compile \
        --cases plain,bias_gelu,bias_gelu_dropout_residual,residual_rowsumsq,rowscale_swiglu,dgelu_bias_grad \
        --json "$out/gemm_fastpath.json" > "$out/gemm_fastpath.log" 2>&1
    echo "gemm rc=$? at ${SECONDS}s"; grep "over plain, paired" "$out/gemm_fastpath.log" | head -42
fi
