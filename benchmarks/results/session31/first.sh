#!/usr/bin/env bash
# Thirty-first session, first call: the LM head's fwd+bwd on main and on the three candidates
# (variants/ftz: the DSL's exp as exp2_ftz; variants/gather: the target logit as a gather + dot
# product; variants/both), the cross-entropy GPU tests on `both`, and GPT-2 against
# torch.compile on the fastest head.
#   bash benchmarks/results/session31/first.sh      (on a GPU, from the repository root)
export CODA_AUTOTUNE=0 PYTHONUNBUFFERED=1
V=benchmarks/results/session31/variants
out=${OUT:-/tmp}; log=$out/first.log
tree() { if [ "$1" = main ]; then echo "$PWD/src"; else echo "$PWD/$V/$1"; fi; }
for v in main ftz gather both; do
  echo "== head $v" >> "$log"
  PYTHONPATH=$(tree $v) timeout 110 python benchmarks/results/session30/head_probe.py \
    --json "$out/head_$v.json" 2>&1 | grep -v Warn >> "$log"
  echo "head $v rc=${PIPESTATUS[0]}"; tail -4 "$log"
done
best=$(python3 - "$out" <<'PY'
import json, sys, pathlib
times = {}
for v in ("main", "ftz", "gather", "both"):
    p = pathlib.Path(sys.argv[1], f"head_{v}.json")
    if p.exists():
        times[v] = min(json.loads(p.read_text())["exp_us"])
print(min(times, key=times.get) if times else "main")
PY
)
echo "fastest head: $best"
PYTHONPATH=$(tree $best) timeout 170 python benchmarks/train.py --models gpt2 --modes compile,coda+graph \
  --steps 8 --warmup 2 --curve none --profile coda+graph --timeout 160 --json "$out/train_gpt2_$best.json" \
  > "$out/train_gpt2.log" 2>&1
echo "train ($best) rc=$?"; tail -4 "$out/train_gpt2.log"
echo "== gpu cross-entropy tests on both" >> "$log"
PYTHONPATH=$(tree both) timeout 120 python -m pytest -q -n 4 -p no:cacheprovider --tb=short \
  tests/gpu/test_ops_cross_entropy.py >> "$log" 2>&1
echo "cross-entropy tests (both) rc=$?"; grep -E "passed|failed" "$log" | tail -2
