#!/usr/bin/env bash
# What the nineteenth session left to measure, in one device call (about 8 minutes): the GPU
# tests of the patched HF models (BERT's fused q/k/v landed untimed), BERT's training step with
# a profile of CODA + graph, and the LM head + cross-entropy ops with 2**29-logit blocks against
# eager, torch.compile and Liger (carry .whl: `pip download --no-deps liger-kernel==0.8.5 -d .whl`).
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=$PYTHONPATH:/tmp/site
fi
timeout 150 python -m pytest -q -n 8 -p no:cacheprovider tests/gpu/test_hf_gpu.py 2>&1 | tee $OUT/gpu_tests_hf.txt | tail -3
timeout 200 python benchmarks/train.py --models bert --modes compile,coda+graph --profile coda+graph \
    --steps 8 --warmup 2 --curve none --timeout 180 --json $OUT/train_bert.json > $OUT/train_bert.log 2>&1
grep -E "tokens/s" $OUT/train_bert.log | tail -4
timeout 240 python benchmarks/micro.py --ops lm_head_cross_entropy --max-autotune "" \
    --json $OUT/micro_ce.json > $OUT/micro_ce.log 2>&1
tail -12 $OUT/micro_ce.log
