#!/usr/bin/env bash
# Forty-eighth session, fourth call (80 GB H100): the three models, CODA beside the fastest
# peers, interleaved rounds. GPT-2's torch.compile with --pad-mm always (its fast LM head: call 2's
# compile+graph, 400.9k, had compiled the slow form), its step profiled to show the head's kernels.
#   run(command="bash benchmarks/results/session48/call4.sh", timeout_s=600)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
timeout 170 python benchmarks/train.py --models gpt2 --modes compile+graph,coda+graph --pad-mm always \
    --steps 30 --rounds 8 --warmup 3 --curve none --profile compile+graph --timeout 160 \
    --json "$out/train_gpt2.json" > "$out/train_gpt2.log" 2>&1
echo "gpt2 rc=$? at ${SECONDS}s"; grep -E "tokens/s|round by round|rror" "$out/train_gpt2.log" | head -8
python benchmarks/breakdown.py "$out/train_gpt2.json" --top 12 > "$out/breakdown_gpt2.txt" 2>&1
head -14 "$out/breakdown_gpt2.txt" | cut -c1-150
timeout 400 python benchmarks/train.py --models bert,llama --modes compile,compile+graph,coda+graph \
    --steps 20 --rounds 8 --warmup 3 --curve none --profile none --timeout 190 \
    --json "$out/train_bert_llama.json" > "$out/train_bert_llama.log" 2>&1
echo "bert,llama rc=$? at ${SECONDS}s"; grep -E "tokens/s|round by round|rror" "$out/train_bert_llama.log" | head -12
