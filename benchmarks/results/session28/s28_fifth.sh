#!/usr/bin/env bash
# Session 28, call 5: the embedding gradient kernel rewritten (grid over sorted tokens): its GPU
# test and its timing against PyTorch's backward.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
timeout 100 python -m pytest -q -p no:cacheprovider --tb=short tests/gpu/test_ops_embedding.py > $OUT/gpu_tests.txt 2>&1
echo "gpu tests rc=$?"; grep -E "passed|failed|FAILED|Error" $OUT/gpu_tests.txt | tail -8
timeout 60 python benchmarks/results/session28/embedding_probe.py > $OUT/embedding_probe.txt 2>&1
echo "probe rc=$?"; tail -3 $OUT/embedding_probe.txt
