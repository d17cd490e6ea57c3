#!/usr/bin/env bash
# Fourteenth session, last device call: a CODA-patched BERT under torch.compile with Inductor's
# explicit fallbacks for coda's ops (coda.integrations.compile.inductor_fallbacks)
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
timeout 100 python benchmarks/results/session14/cc_diag.py bert > $OUT/cc_diag_fixed.log 2>&1
echo "cc_diag rc=$? at $SECONDS s" >> $OUT/cc_diag_fixed.log
grep -v "^\[" $OUT/cc_diag_fixed.log | tail -12
