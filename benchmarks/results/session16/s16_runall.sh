#!/usr/bin/env bash
# Sixteenth session, first device call: run_all.sh on a freshly started machine (the compiled
# training modes now inside unpadded_batches: no explicit attention mask under Dynamo)
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
t0=$SECONDS
timeout 583 bash benchmarks/run_all.sh > $OUT/run_all.log 2>&1
echo "run_all.sh rc=$? in $((SECONDS-t0)) s" >> $OUT/run_all.log
cd benchmarks/results && tar czf $OUT/results.tgz *.json *.log status.txt ../../docs/img && cd ../..
grep -E "rc=|tokens/s" $OUT/run_all.log | tail -30
