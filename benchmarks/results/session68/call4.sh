export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee "$out/gpu.txt"
timeout 330 python benchmarks/train.py --models gpt2 --modes compile+graph,coda+graph --pad-mm always \
    --tree s4e4=var_s4e4 --tree s5e4=var_s5e4 \
    --steps 15 --rounds 8 --warmup 3 --curve none --profile none --timeout 320 \
    --json "$out/train_gpt2.json" > "$out/train_gpt2.log" 2>&1
echo "gpt2 rc=$? at ${SECONDS}s"; grep -E "tokens/s|round by round|rror" "$out/train_gpt2.log" | head -12
