#!/usr/bin/env bash
# Twenty-third session: GPT-2's and BERT's training steps against torch.compile, profiled (the
# 40 longest kernels listed).
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
timeout 400 python benchmarks/train.py --models gpt2,bert --modes compile,coda+graph --profile coda+graph \
  --steps 8 --warmup 2 --curve none --timeout 200 --json $OUT/train.json > $OUT/train.log 2>&1
grep -E "tokens/s" $OUT/train.log
python - <<'PY'
import json, os
d = json.load(open(os.environ["OUT"] + "/train.json"))
for r in d["rows"]:
    b = r.get("breakdown") or {}
    print(r["model"], r["mode"], round(r.get("tokens_per_s") or 0), r.get("step_ms"),
          {k: round(v) for k, v in b.items() if k != "top"})
    for t in b.get("top", []):
        print("   ", t[0][:70], t[1], round(t[2]), t[3])
PY
