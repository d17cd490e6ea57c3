#!/usr/bin/env bash
# Twenty-sixth session: after two captures in one process replayed into an illegal address
# (s26_first.sh), one capture a process: GPT-2, BERT and LLaMA with the side stream ("graph",
# the default) and without ("0"), GPT-2's first again at the end; then (which is at fault) two
# captures without it in one process.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
D=benchmarks/results/session26
run() {  # model modes tag
  timeout 130 python $D/stream_probe.py $1 --modes=$2 --json=$OUT/$3.json > $OUT/$3.log 2>&1
  echo "== $1 $2 rc=$?"; grep -E "^$1 |Error" $OUT/$3.log | cut -c1-400
}
run gpt2 graph gpt2_side; run gpt2 0 gpt2_one; run bert graph bert_side; run bert 0 bert_one
run gpt2 graph gpt2_side2; run llama graph llama_side; run llama 0 llama_one; run gpt2 0,0 gpt2_two
cd $OUT && tar czf probes.tgz *.json *.log && rm -f *.json *.log
