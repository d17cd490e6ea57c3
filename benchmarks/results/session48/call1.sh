#!/usr/bin/env bash
# Forty-eighth session, first call: where a GPT-2 (and BERT) CODA step's memsets and device copies
# come from, and the GPU's idle time after each (benchmarks/results/session48/memsets.py).
#   run(command="bash benchmarks/results/session48/call1.sh", timeout_s=400)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
for model in gpt2 bert; do
  timeout 170 python benchmarks/results/session48/memsets.py --model $model --out "$out/memsets_$model.txt" \
      > "$out/memsets_$model.log" 2>&1
  echo "$model rc=$? at ${SECONDS}s"; grep -v -i warn "$out/memsets_$model.log" | tail -45 | cut -c1-230
done
