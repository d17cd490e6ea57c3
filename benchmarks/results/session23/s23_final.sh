#!/usr/bin/env bash
# Twenty-third session, last device call: GPT-2's and BERT's training steps against torch.compile
# with the session's final code (the activations' saved slope; c_attn's weight gradient in its
# parameter's layout), twice, profiled.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
for run in 1 2; do
  timeout 250 python benchmarks/train.py --models gpt2,bert --modes compile,coda+graph --profile coda+graph \
    --steps 8 --warmup 2 --curve none --timeout 120 --json $OUT/train$run.json > $OUT/train$run.log 2>&1
  grep -E "tokens/s" $OUT/train$run.log
done
python - <<'PY'
import json, os
for run in (1, 2):
    d = json.load(open(os.environ["OUT"] + f"/train{run}.json"))
    for r in d["rows"]:
        b = r.get("breakdown") or {}
        print(run, r["model"], r["mode"], round(r.get("tokens_per_s") or 0), r.get("step_ms"),
              {k: round(v) for k, v in b.items() if k != "top"})
        for t in b.get("top", [])[:30] if run == 1 else []:
            print("   ", t[0][:70], t[1], round(t[2]), t[3])
PY
