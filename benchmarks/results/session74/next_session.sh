#!/usr/bin/env bash
# For the next session's first call (the seventy-fourth session's device time went to refused
# starts): on an H200, GPT-2 against compile+graph with the rounds' order rotating (8 rounds:
# each of the two runs takes each place four times), then issue 8's table; elsewhere the same
# GPT-2 reading and the HF GPU tests.
#   run(command="cd .snap && bash benchmarks/results/session74/next_session.sh", kind="nvidia-h200",
#       carry=[".snap"], timeout_s=595)
# First, the GPU tests of the cross-entropy head, changed after the 74th session's last call (its
# float16 path with a folded norm, Blocks.unscaled: worth a float16 case on the GPU as well).
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee "$out/gpu.txt"
timeout 150 python -m pytest -q -n 4 -p no:cacheprovider --tb=short tests/gpu/test_ops_cross_entropy.py \
    > "$out/tests.log" 2>&1
echo "tests rc=$? at ${SECONDS}s"; grep -E "FAILED|ERROR" "$out/tests.log" | head; tail -1 "$out/tests.log"
timeout 130 python benchmarks/train.py --models gpt2 --modes compile+graph,coda+graph --pad-mm always \
    --steps 15 --rounds 8 --warmup 3 --curve none --profile none --timeout 120 \
    --json "$out/train_gpt2.json" > "$out/train_gpt2.log" 2>&1
echo "gpt2 rc=$? at ${SECONDS}s"; grep -E "tokens/s|round by round|rror" "$out/train_gpt2.log" | head -6
if grep -q H200 "$out/gpu.txt"; then
    timeout $((585 - SECONDS)) python benchmarks/gemm.py --rounds 5 --no-compile \
        --cases plain,bias_gelu,bias_gelu_dropout_residual,residual_rowsumsq,rowscale_swiglu,dgelu_bias_grad \
        --json "$out/gemm_fastpath.json" > "$out/gemm_fastpath.log" 2>&1
    echo "gemm rc=$? at ${SECONDS}s"; grep "over plain, paired" "$out/gemm_fastpath.log" | head -42
else
    timeout $((585 - SECONDS)) python -m pytest -q -n 4 -p no:cacheprovider --tb=short tests/gpu/test_hf_gpu.py \
        > "$out/hf_tests.log" 2>&1
    echo "hf tests rc=$? at ${SECONDS}s"; grep -E "FAILED|ERROR" "$out/hf_tests.log" | head; tail -1 "$out/hf_tests.log"
fi
