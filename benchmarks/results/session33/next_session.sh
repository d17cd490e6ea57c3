#!/usr/bin/env bash
# Left for the next device session (thirty-third session's closing note), two calls:
#   bash benchmarks/results/session33/next_session.sh tests     (~6 min)
#   bash benchmarks/results/session33/next_session.sh rates     (~9 min)
# tests: the whole GPU suite with the exponential head path as the default (call 3 ran only the
#   cross-entropy, HF-model and embedding GPU tests on it).
# rates: GPT-2 torch.compile against coda+graph in two more rounds (each mode in its own
#   process: the ratio was 1.195x and 1.209x in two single runs, torch.compile moving between
#   483k and 494k), then the micro suite's missing max-autotune row, the LM head + cross-entropy
#   at GPT-2 size (call 4 ran out of time inside it).
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
out=${OUT:-/tmp}
case "$1" in
  tests)
    timeout 560 python -m pytest -q -n 8 -p no:cacheprovider --tb=short tests/gpu > "$out/gpu_tests.txt" 2>&1
    echo "gpu tests rc=$?"; grep -E "passed|failed|FAILED|Error" "$out/gpu_tests.txt" | tail -12 ;;
  rates)
    for round in 1 2; do
      timeout 150 python benchmarks/train.py --models gpt2 --modes compile,coda+graph --steps 30 --warmup 2 \
        --curve none --profile none --timeout 140 --json "$out/gpt2_round$round.json" > "$out/gpt2_round$round.log" 2>&1
      echo "round $round rc=$?"; grep -E "tokens/s" "$out/gpt2_round$round.log"
    done
    timeout 200 python benchmarks/micro.py --sizes gpt2 --ops lm_head_cross_entropy --max-autotune gpt2 \
      --no-liger --timeout 190 --json "$out/micro_ce_max_autotune.json" > "$out/micro_ce.log" 2>&1
    echo "micro rc=$?"; grep -E "max_autotune|compile|coda" "$out/micro_ce.log" | tail -8 ;;
  *) echo "usage: $0 tests | rates"; exit 2 ;;
esac
