#!/usr/bin/env bash
# Sixty-second session, call 1: GROUP_M's effect on (c) at K = 768 and K = 2048 (session61's
# group_probe.py), then, on an H200 only, GPT-2 against compile+graph in 6 interleaved rounds and
# issue 8's table on the current build (session59/next_h200.sh's steps, in the time left).
#   run(command="bash benchmarks/results/session62/call1.sh", timeout_s=598)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}/call1; mkdir -p "$out"
gpu=$(nvidia-smi --query-gpu=name,power.limit --format=csv,noheader); echo "$gpu" | tee "$out/gpu.txt"
probe=benchmarks/results/session61/group_probe.py
timeout 150 python $probe --json "$out/group_768.json" > "$out/group_768.log" 2>&1
echo "group 768 rc=$? at ${SECONDS}s"; tail -2 "$out/group_768.log"
timeout 100 python $probe --shape 16384x8192x2048 --groups 1,8,32 --json "$out/group_2048.json" \
    > "$out/group_2048.log" 2>&1
echo "group 2048 rc=$? at ${SECONDS}s"; tail -2 "$out/group_2048.log"
case "$gpu" in
*H200*)
    timeout 200 python benchmarks/train.py --models gpt2 --modes compile+graph,coda+graph --pad-mm always \
        --steps 20 --rounds 6 --warmup 3 --curve none --profile none --timeout 190 \
        --json "$out/train_gpt2.json" > "$out/train_gpt2.log" 2>&1
    echo "gpt2 rc=$? at ${SECONDS}s"; grep -E "tokens/s|round by round|rror" "$out/train_gpt2.log" | head -6
    timeout $((585 - SECONDS)) python benchmarks/gemm.py --rounds 5 --no-compile \
        --cases plain,bias_gelu,bias_gelu_dropout_residual,residual_rowsumsq,rowscale_swiglu,dgelu_bias_grad \
        --json "$out/gemm_fastpath.json" > "$out/gemm_fastpath.log" 2>&1
    echo "gemm rc=$? at ${SECONDS}s"; python benchmarks/report.py --gemm "$out/gemm_fastpath.json" 2>&1 | tail -12 ;;
*) echo "not an H200: GPT-2 and the fast-path table not run" ;;
esac
tar -C "${OUT:-/tmp}" -czf "${OUT:-/tmp}/call1.tgz" call1 && rm -rf "$out"
