#!/usr/bin/env bash
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
nvidia-smi -L > $OUT/gpu_tests.log
t0=$SECONDS
timeout 540 python -m pytest -q -n 8 -p no:cacheprovider tests/gpu tests/integrations/test_compile_gpu.py >> $OUT/gpu_tests.log 2>&1
echo "pytest rc=$? in $((SECONDS-t0)) s" >> $OUT/gpu_tests.log
tail -25 $OUT/gpu_tests.log
