#!/usr/bin/env bash
# What the twentieth session left to measure (its device time was spent). From the repository root:
#   bash benchmarks/results/session20/next_session.sh probes    # about 3 minutes:
#        ln_probe.py: LayerNorm's backward in one pass, variants against the two maps; the winner,
#        if any beats the maps, goes into coda.nn.layer_norm (the first one-pass kernel, 50.7
#        against 48.3 us, is in git history: 04da45b and its follow-ups, reverted after 3313354);
#        dw_probe.py: the norm-folded weight gradients (GPT-2's c_attn: 108 tiles for 132 SMs) as
#        cuBLAS GEMM + CODA map against CODA's GEMM with the epilogue
#   bash benchmarks/results/session20/next_session.sh run_all   # the report's one command on a
#        freshly started H200 (last timed in the sixteenth session: 524 s; Liger needs `.whl/`)
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
if [ "$1" = probes ]; then
  timeout 300 python benchmarks/results/session20/ln_probe.py --json $OUT/ln_probe.json 2>&1 | tee $OUT/ln_probe.log | tail -30
  timeout 120 python benchmarks/results/session20/dw_probe.py --json $OUT/dw_probe.json 2>&1 | tee $OUT/dw_probe.log
  exit
fi
if [ "$1" = run_all ]; then
  start=$(date +%s)
  timeout 590 bash benchmarks/run_all.sh > $OUT/run_all.log 2>&1
  echo "run_all.sh: rc $? in $(( $(date +%s) - start )) s"
  cp -r benchmarks/results/*.json docs/img/*.png $OUT/ 2>/dev/null
fi
