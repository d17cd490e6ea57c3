#!/usr/bin/env bash
# Left for the next device session (thirty-third session's closing note), three calls:
#   bash benchmarks/results/session33/next_session.sh tests     (~6 min)
#   bash benchmarks/results/session33/next_session.sh gpt2      (~7 min)
#   bash benchmarks/results/session33/next_session.sh others    (~8 min)
# tests: the whole GPU suite with the exponential head path as the default (call 3 ran only the
#   cross-entropy, HF-model and embedding GPU tests on it).
# gpt2: GPT-2 torch.compile, torch.compile with the step captured as a CUDA graph (the new peer
#   compile+graph: does torch.compile gain from a graph as CODA does?) and coda+graph, twice (the
#   ratio was 1.195x and 1.209x in two single runs, torch.compile moving between 483k and 494k).
# others: compile+graph against coda+graph on LLaMA and BERT; then the micro suite's LM head +
#   cross-entropy at GPT-2 size with max-autotune (call 4 ran out of time inside it), which also
#   runs micro.py's new replayed comparison (every fwd+bwd from a CUDA graph) for the first time.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
out=${OUT:-/tmp}
train() {  # train NAME SECONDS ARGS...
  local name=$1 limit=$2; shift 2
  timeout "$limit" python benchmarks/train.py "$@" --steps 30 --warmup 2 --curve none --profile none \
    --timeout $((limit - 10)) --json "$out/$name.json" > "$out/$name.log" 2>&1
  echo "$name rc=$?"; grep -E "tokens/s|Error|error" "$out/$name.log" | head -8
}
case "$1" in
  tests)
    timeout 560 python -m pytest -q -n 8 -p no:cacheprovider --tb=short tests/gpu > "$out/gpu_tests.txt" 2>&1
    echo "gpu tests rc=$?"; grep -E "passed|failed|FAILED|Error" "$out/gpu_tests.txt" | tail -12 ;;
  gpt2)
    train gpt2_round1 200 --models gpt2 --modes compile,compile+graph,coda+graph
    train gpt2_round2 200 --models gpt2 --modes compile,compile+graph,coda+graph ;;
  others)
    train llama_bert 280 --models llama+bert --modes compile,compile+graph,coda+graph
    timeout 200 python benchmarks/micro.py --sizes gpt2 --ops lm_head_cross_entropy --max-autotune gpt2 \
      --no-liger --timeout 190 --json "$out/micro_ce_max_autotune.json" > "$out/micro_ce.log" 2>&1
    echo "micro rc=$?"; tail -12 "$out/micro_ce.log" ;;
  *) echo "usage: $0 tests | gpt2 | others"; exit 2 ;;
esac
