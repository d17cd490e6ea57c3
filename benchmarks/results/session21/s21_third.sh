#!/usr/bin/env bash
# Twenty-first session, third device call: LayerNorm's one-pass backward variants timed from CUDA
# graphs (the second call's do_bench timings measured the host), and GPT-2's torch.compile step
# profiled beside CODA's (where the compiled step spends its GPU time).
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
timeout 240 python benchmarks/results/session20/ln_probe.py --json $OUT/ln_probe.json > $OUT/ln_probe.log 2>&1
grep -E "two maps" $OUT/ln_probe.log; sort -t: -k2 -n $OUT/ln_probe.log | head -3
timeout 200 python benchmarks/train.py --models gpt2 --modes compile,coda+graph --profile compile,coda+graph \
  --steps 8 --warmup 2 --curve none --timeout 180 --json $OUT/train_gpt2.json > $OUT/train_gpt2.log 2>&1
grep -E "tokens/s" $OUT/train_gpt2.log
