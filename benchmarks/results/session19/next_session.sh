#!/usr/bin/env bash
# What the nineteenth session left to measure (it landed two changes after its device time ran
# out: BERT's fused q/k/v projections, and one-MUFU reciprocals and exponentials in the erf GELU
# and SiLU). Two device calls of about 8 minutes each:
#   bash next_session.sh tests     # the GPU tests those changes touch
#   bash next_session.sh timings   # BERT's step (profiled), the fast-path table, the LM head ops
# Liger rows need its wheel carried: `pip download --no-deps liger-kernel==0.8.5 -d .whl`.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
if [ "$1" = tests ]; then
  timeout 560 python -m pytest -q -n 8 -p no:cacheprovider tests/gpu/test_triton_gpu.py \
    tests/gpu/test_ops_linear.py tests/gpu/test_ops_gated.py tests/gpu/test_hf_gpu.py 2>&1 \
    | tee $OUT/gpu_tests.txt | tail -4
  exit
fi
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=$PYTHONPATH:/tmp/site
fi
timeout 200 python benchmarks/train.py --models llama+bert --modes compile,coda+graph --profile coda+graph \
    --steps 8 --warmup 2 --curve none --timeout 180 --json $OUT/train.json > $OUT/train.log 2>&1
grep -E "tokens/s" $OUT/train.log | tail -4
timeout 200 python benchmarks/gemm.py --no-compile --rounds 5 \
  --cases plain,bias_gelu,bias_gelu_dropout_residual,residual_rowsumsq,rowscale_swiglu,dgelu_bias_grad \
  --json $OUT/gemm_fastpath.json > $OUT/gemm_fastpath.log 2>&1
grep "paired" $OUT/gemm_fastpath.log | tail -8
timeout 150 python benchmarks/micro.py --ops lm_head_cross_entropy --max-autotune "" \
    --json $OUT/micro_ce.json > $OUT/micro_ce.log 2>&1
tail -8 $OUT/micro_ce.log
