#!/usr/bin/env bash
# run_all.sh as one command on a freshly started machine (side-by-side warm-ups), memory sampled
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
nvidia-smi -L > $OUT/run_all.log
(while true; do echo "$SECONDS s: host $(free -g | awk 'NR==2{print $3}') GiB used, gpu $(nvidia-smi --query-gpu=memory.used --format=csv,noheader)"; sleep 5; done) > $OUT/mem.log 2>&1 &
t0=$SECONDS
timeout 590 bash benchmarks/run_all.sh >> $OUT/run_all.log 2>&1
echo "run_all.sh rc=$? in $((SECONDS-t0)) s" >> $OUT/run_all.log
kill %1
cd benchmarks/results && tar czf $OUT/results.tgz micro.json micro.log cross_entropy.json cross_entropy.log launch_counts.json launch_counts.log train.json train.log status.txt report.log gpu_clocks.log ../../docs/img 2>/dev/null
grep -E "rc=|geomean" $OUT/run_all.log; sort -t' ' -k5 -n $OUT/mem.log | tail -2
head -3 gpu_clocks.log; tail -3 gpu_clocks.log; cat status.txt | tail -7
