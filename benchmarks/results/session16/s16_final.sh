#!/usr/bin/env bash
# Sixteenth session, third device call: after the erf GELU rewrite, the two-tile heuristic and the
# BERT feed-forward as one mlp: the training matrix (run_all.sh's train stage), the GPU tests of
# the touched ops and models, and the micro suite's linear_gelu cases.
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
t0=$SECONDS
timeout 280 bash benchmarks/run_all.sh train > $OUT/run_all_train.log 2>&1
echo "run_all.sh train rc=$? in $((SECONDS-t0)) s" >> $OUT/run_all_train.log
export PYTHONPATH=$PWD/src:$PYTHONPATH PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
timeout 170 python -m pytest -q -n 8 tests/gpu/test_ops_linear.py tests/gpu/test_hf_gpu.py \
    tests/integrations/test_compile_gpu.py > $OUT/gpu_tests.txt 2>&1
echo "gpu tests rc=$?" >> $OUT/gpu_tests.txt
timeout 90 python benchmarks/micro.py --ops linear_gelu --max-autotune '' \
    --json $OUT/micro_linear_gelu.json > $OUT/micro_linear_gelu.log 2>&1
cd benchmarks/results && tar czf $OUT/results.tgz train.json train.log status.txt gpu_clocks.log ../../docs/img && cd ../..
grep -E "rc=|tokens/s" $OUT/run_all_train.log | tail -20; tail -3 $OUT/gpu_tests.txt; tail -5 $OUT/micro_linear_gelu.log
