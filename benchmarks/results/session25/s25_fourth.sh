#!/usr/bin/env bash
# Twenty-fifth session, last device call: the final code (the target logit back in the forward's
# epilogue; a wide ragged map in 16x512 tiles; stores in the order reductions, then tiles): the GPU
# tests of the cross-entropy and of the map tiles, GPT-2 in CODA + graph mode against torch.compile.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
timeout 100 python -m pytest -q -x -n 8 -p no:cacheprovider tests/gpu/test_ops_cross_entropy.py \
  "tests/gpu/test_triton_gpu.py::test_maps_take_the_tile_of_what_they_write" > $OUT/gpu_tests.txt 2>&1; tail -2 $OUT/gpu_tests.txt
timeout 140 python benchmarks/train.py --models gpt2 --modes compile,coda+graph --profile coda+graph \
  --steps 8 --warmup 2 --curve none --timeout 100 --json $OUT/train_gpt2.json > $OUT/train_gpt2.log 2>&1
grep -hE "tokens/s" $OUT/train_*.log
python benchmarks/breakdown.py $OUT/train_gpt2.json --top 14
