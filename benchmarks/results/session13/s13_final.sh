#!/usr/bin/env bash
# run_all.sh's training stage on a fresh machine (LLaMA and BERT warming up together), clocks
# logged; then where a coda-patched BERT's torch.compile warm-up goes
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
t0=$SECONDS
timeout 280 bash benchmarks/run_all.sh train > $OUT/run_all_train.log 2>&1
echo "run_all.sh train rc=$? in $((SECONDS-t0)) s" >> $OUT/run_all_train.log
cd benchmarks/results && tar czf $OUT/results.tgz train.json train.log status.txt report.log gpu_clocks.log ../../docs/img && cd ../..
tail -22 $OUT/run_all_train.log
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
TORCH_LOGS=recompiles,graph_breaks timeout $((575 - SECONDS)) python .exp/cc_diag.py bert > $OUT/cc_diag.log 2>&1
echo "cc_diag rc=$? at $SECONDS s" >> $OUT/cc_diag.log
grep -v "^  File\|^    " $OUT/cc_diag.log | tail -30
