#!/usr/bin/env bash
# Twenty-sixth session: GPT-2's cross-entropy in one block of 16384 rows (2**30 logits) against
# the default two (2**29), one captured step a process, alternated twice (stream_probe.py).
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
D=benchmarks/results/session26
for n in 29 30 29 30; do
  timeout 110 python $D/stream_probe.py gpt2 --modes=0 --block-logits=$n --json=$OUT/block$n.json >> $OUT/block$n.log 2>&1
  echo "== 2**$n rc=$?"; grep -E "^gpt2 |Error" $OUT/block$n.log | tail -1 | cut -c1-330
  mv $OUT/block$n.json $OUT/block${n}_$RANDOM.json
done
