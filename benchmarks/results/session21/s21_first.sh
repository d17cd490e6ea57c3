#!/usr/bin/env bash
# Twenty-first session, first device call: programmatic dependent launch (PDL). The gap it
# closes between kernels of a CUDA graph (pdl_probe.py), CODA's training steps with it off and
# on (CODA_PDL=0/1, at commit 293a64a; reverted after), and the GPU tests with it on.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv | tee $OUT/gpu.txt
timeout 90 python benchmarks/results/session21/pdl_probe.py --json $OUT/pdl_probe.json 2>&1 | tee $OUT/pdl_probe.log
for pdl in 0 1; do
  profile=none; [ $pdl = 1 ] && profile=coda+graph
  CODA_PDL=$pdl timeout 150 python benchmarks/train.py --models gpt2,bert --modes coda+graph --profile $profile \
    --steps 8 --warmup 2 --curve none --timeout 140 --json $OUT/train_pdl$pdl.json > $OUT/train_pdl$pdl.log 2>&1
  echo "CODA_PDL=$pdl"; grep -E "tokens/s" $OUT/train_pdl$pdl.log
done
timeout 260 python -m pytest -q -n 8 -p no:cacheprovider tests/gpu/test_triton_gpu.py tests/gpu/test_ops_linear.py \
  tests/gpu/test_hf_gpu.py 2>&1 | tee $OUT/gpu_tests.txt | tail -4
