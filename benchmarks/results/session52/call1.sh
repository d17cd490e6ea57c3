#!/usr/bin/env bash
# The fifty-second session's first call: (1) the two column-sum-note tests, now run on the GPU's
# Triton kernels (they ran the reference on GPU machines, and one failed there: no notes);
# (2) GPT-2, BERT and LLaMA beside compile+graph on an H200, 8 interleaved rounds each (the
# fiftieth session's changes were timed on H100s only; GPT-2's last H200 reading: 1.194x).
#   run(command="bash benchmarks/results/session52/call1.sh", timeout_s=595)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader
PYTHONPATH=$PWD/src timeout 90 python -m pytest -q -p no:cacheprovider tests/ops/test_common.py \
    -k "note or column_sums_to" > "$out/tests.log" 2>&1
echo "tests rc=$? at ${SECONDS}s"; tail -3 "$out/tests.log"
for model in gpt2 bert llama; do
    timeout 160 python benchmarks/train.py --models $model --modes compile+graph,coda+graph --pad-mm always \
        --steps 20 --rounds 8 --warmup 3 --curve none --profile none --timeout 150 \
        --json "$out/train_$model.json" > "$out/train_$model.log" 2>&1
    echo "$model rc=$? at ${SECONDS}s"; grep -E "tokens/s|round by round|rror" "$out/train_$model.log" | head -6
done
