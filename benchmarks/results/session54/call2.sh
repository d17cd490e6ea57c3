#!/usr/bin/env bash
# The fifty-fourth session's second call: run_all.sh's training stage (the seven modes of the
# three models, four interleaved rounds, GPT-2's loss curve, the profiled steps), then GPT-2
# against compile+graph in 6 interleaved rounds; the report is drawn here from what comes back.
#   run(command="bash benchmarks/results/session54/call2.sh", carry=[".whl"], timeout_s=598)
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader
PYTHONPATH=/tmp/site bash benchmarks/run_all.sh train > "$out/run_all_train.log" 2>&1
echo "run_all train rc=$? at ${SECONDS}s"; tail -3 benchmarks/results/status.txt
cp benchmarks/results/train.json benchmarks/results/train.log benchmarks/results/gpu_clocks.log "$out/" 2>/dev/null
grep -A30 "| model | mode" benchmarks/results/train.log | cut -c1-170 | head -40
timeout 125 python benchmarks/train.py --models gpt2 --modes compile+graph,coda+graph --pad-mm always \
    --steps 20 --rounds 6 --warmup 3 --curve none --profile none --timeout 118 \
    --json "$out/train_gpt2.json" > "$out/train_gpt2.log" 2>&1
echo "gpt2 rc=$? at ${SECONDS}s"; grep -E "tokens/s|round by round|rror" "$out/train_gpt2.log" | head -6
