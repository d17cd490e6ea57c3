#!/usr/bin/env bash
# Twenty-sixth session: two captured GPT-2 steps in one process replayed into an illegal
# address (s26_second.sh, without the side stream too). Which graph, and is it CODA's: the
# patched pair with the second graph replayed first, the same with unpatched models, and each
# of GPT-2's ops captured twice on its own.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
D=benchmarks/results/session26
for flags in "--reverse" "--eager" ; do
  timeout 150 python $D/stream_probe.py gpt2 --modes=0,0 $flags --json=$OUT/two${flags/--/_}.json \
    > $OUT/two${flags/--/_}.log 2>&1
  echo "== $flags rc=$?"; grep -E "^gpt2 |replayed|Error" $OUT/two${flags/--/_}.log | cut -c1-300
done
# one op at a time, two graphs each (capture_twice.py: every op in its own process)
timeout 200 python $D/capture_twice.py 2>&1 | tee $OUT/capture_twice.txt
