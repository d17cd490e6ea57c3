#!/usr/bin/env bash
# Fifteenth session, first device call: two persistent programs per SM (`Config.programs_per_sm`)
# on LLaMA's gated-MLP launches and on the fast-path epilogues; the patched BERT under
# torch.compile since the explicit Inductor fallbacks.
# Ran at commit 8df81a8 (`git show 8df81a8`): the option was measured slower everywhere and removed
# in the next commit, so this script no longer runs as is.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
nvidia-smi --query-gpu=name,clocks.sm,power.draw,power.limit --format=csv > $OUT/gpu.txt
timeout 130 python benchmarks/kernel_configs.py llama --cases swiglu_grad,swiglu_up,gated_dx --configs p2 \
  --json $OUT/llama_p2.json > $OUT/llama_p2.log 2>&1
echo "kernel_configs rc=$? at $SECONDS s" >> $OUT/llama_p2.log
timeout 250 python benchmarks/train.py --models bert --modes compile,coda,coda+compile --steps 8 --warmup 2 \
  --curve none --profile '' --timeout 230 --json $OUT/train_bert_cc.json > $OUT/train_bert_cc.log 2>&1
echo "train rc=$? at $SECONDS s" >> $OUT/train_bert_cc.log
for shape in 8192x4096x4096 16384x8192x2048 16384x3072x768 16384x768x3072; do
  left=$((585 - SECONDS)); [ $left -lt 30 ] && break
  timeout $left python benchmarks/gemm.py --no-compile --shapes $shape \
    --cases plain,bias_gelu,bias_gelu_dropout_residual,residual_rowsumsq,dgelu_bias_grad \
    --json $OUT/gemm_p2_$shape.json >> $OUT/gemm_p2.log 2>&1
  echo "gemm $shape rc=$? at $SECONDS s" >> $OUT/gemm_p2.log
done
tail -5 $OUT/llama_p2.log; tail -12 $OUT/train_bert_cc.log; cat $OUT/gemm_p2.log | cut -c1-400
