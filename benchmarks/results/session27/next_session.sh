#!/usr/bin/env bash
# Left for the next device session (twenty-seventh session's closing note): one call.
# 1. The Concat GPU tests added after this session's last device call (transposed pieces along
#    K, row pieces along M, both Hopper kernels). 2. Every GPT-2 GEMM beside CODA's plain GEMM of
#    the same operands in the same configuration (`coda_plain`: what each epilogue costs; the
#    N = 768 launches against their bare GEMM). 3. The fast-path table of issue 8 (last run in
#    the twentieth session), with back-to-back ratios.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
timeout 90 python -m pytest -q -p no:cacheprovider tests/gpu/test_concat_gpu.py > $OUT/gpu_tests.txt 2>&1
echo "concat tests rc=$?"; tail -3 $OUT/gpu_tests.txt
timeout 200 python benchmarks/kernel_configs.py gpt2 --configs heuristic \
  --json $OUT/gpt2_plain.json > $OUT/gpt2_plain.log 2>&1
echo "gpt2 rc=$?"; grep "^{" $OUT/gpt2_plain.log | cut -c1-400
timeout 280 python benchmarks/gemm.py --no-compile --rounds 5 \
  --cases plain,bias_gelu,bias_gelu_dropout_residual,residual_rowsumsq,rowscale_swiglu,dgelu_bias_grad \
  --json $OUT/gemm_fastpath.json > $OUT/gemm_fastpath.log 2>&1
echo "gemm rc=$?"; python benchmarks/report.py --gemm $OUT/gemm_fastpath.json 2>&1 | tail -30
