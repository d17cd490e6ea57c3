#!/usr/bin/env bash
# Session 28, call 6: the report's one command on a freshly started H200
# with this session's code (carried row sums, no zero gradients for them, coda.ops.embedding), Liger's wheel
# carried in .whl/. Everything it writes comes back as one archive, $OUT/run_all.tar.gz.
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
start=$(date +%s)
timeout 585 bash benchmarks/run_all.sh > $OUT/run_all.log 2>&1
echo "run_all.sh: rc $? in $(( $(date +%s) - start )) s"
tar czf $OUT/run_all.tar.gz benchmarks/results/*.json benchmarks/results/*.log benchmarks/results/status.txt \
  docs/img/*.png 2>/dev/null
tail -8 benchmarks/results/status.txt
