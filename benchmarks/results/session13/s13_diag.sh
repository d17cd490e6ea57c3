export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
timeout 240 python .exp/cc_diag.py bert > $OUT/cc_diag.log 2>&1
echo "cc_diag rc=$? at $SECONDS s" >> $OUT/cc_diag.log
grep -v "Warn\|warn" $OUT/cc_diag.log | cut -c1-1500 | tail -20
