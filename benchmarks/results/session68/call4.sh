#!/usr/bin/env bash
# Sixty-eighth session, call 4: GPT-2's step with the heuristic's K <= 1024 ping-pong configuration
# against two variants, in interleaved rounds. Run from a snapshot holding the variant trees,
# made from src/coda by: for v in s4e4 s5e4; do mkdir -p var_$v && cp -r src/coda var_$v/; done
# and in each var_*/coda/codegen/tuning.py's heuristic, splitting
#     if (k <= 1024 or pieces_along_k or sums_a) and pingpong: return Config(128, 128, 64, 4, 4, split_epilogue=2, ...)
# into "if k <= 1024 and pingpong: return Config(128, 128, 64, 4, S, split_epilogue=4, pingpong=True)"
# (S = 4 or 5) followed by the old line for pieces_along_k or sums_a.
#   run(command="cd .snap && bash call4.sh", carry=[".snap"], timeout_s=360)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee "$out/gpu.txt"
timeout 330 python benchmarks/train.py --models gpt2 --modes compile+graph,coda+graph --pad-mm always \
    --tree s4e4=var_s4e4 --tree s5e4=var_s5e4 \
    --steps 15 --rounds 8 --warmup 3 --curve none --profile none --timeout 320 \
    --json "$out/train_gpt2.json" > "$out/train_gpt2.log" 2>&1
echo "gpt2 rc=$? at ${SECONDS}s"; grep -E "tokens/s|round by round|rror" "$out/train_gpt2.log" | head -12
