#!/usr/bin/env bash
# For the fifty-first session's first call (prepared in the fiftieth, not run): the fiftieth's
# changes (the norms' backward loading its next row in registers; `linear` without an epilogue
# on cuBLAS) were timed on H100s only. (1) ln_grid_probe.py: fewer one-warp programs and two rows
# a warp at 768 columns; (2) GPT-2, BERT and LLaMA beside compile+graph, 8 interleaved rounds each
# (GPT-2's H200 reading before the change: 1.194x); the probe also times sum_partials's blocks.
# The micro suite: next_session_micro.sh.
#   run(command="bash benchmarks/results/session50/next_session.sh", timeout_s=595)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader
PYTHONPATH=$PWD/src timeout 120 python benchmarks/results/session50/ln_grid_probe.py > "$out/ln_grid.log" 2>&1
echo "probe rc=$? at ${SECONDS}s"; cut -c1-110 "$out/ln_grid.log"
for model in gpt2 bert llama; do
    timeout 150 python benchmarks/train.py --models $model --modes compile+graph,coda+graph --pad-mm always \
        --steps 20 --rounds 8 --warmup 3 --curve none --profile none --timeout 140 \
        --json "$out/train_$model.json" > "$out/train_$model.log" 2>&1
    echo "$model rc=$? at ${SECONDS}s"; grep -E "tokens/s|round by round|rror" "$out/train_$model.log" | head -6
done
