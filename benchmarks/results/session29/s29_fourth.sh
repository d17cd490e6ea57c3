#!/usr/bin/env bash
# Twenty-ninth session, fourth device call: the whole GPU test suite on the session's final code.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
timeout 430 python -m pytest -q -n 8 -p no:cacheprovider --tb=short tests/gpu > $OUT/gpu_tests.txt 2>&1
echo "gpu tests rc=$?"; grep -E "passed|failed|FAILED|Error" $OUT/gpu_tests.txt | tail -12
