#!/usr/bin/env bash
# Sixteenth session, fourth device call: the training matrix of the final code (the erf GELU
# rewrite kept; the two-tile heuristic and the one-mlp BERT feed-forward reverted).
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
t0=$SECONDS
timeout 270 bash benchmarks/run_all.sh train > $OUT/run_all_train.log 2>&1
echo "run_all.sh train rc=$? in $((SECONDS-t0)) s" >> $OUT/run_all_train.log
cd benchmarks/results && tar czf $OUT/results.tgz train.json train.log status.txt gpu_clocks.log ../../docs/img && cd ../..
grep -E "rc=|tokens/s" $OUT/run_all_train.log | tail -20
