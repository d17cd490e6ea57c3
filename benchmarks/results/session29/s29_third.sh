#!/usr/bin/env bash
# Twenty-ninth session, third device call: GPT-2 against torch.compile alone (coda+graph
# profiled), then issue 8's case (e) and plain at every shape (gemm.py, rounds back to back).
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
timeout 200 python benchmarks/train.py --models gpt2 --modes compile,coda+graph --steps 8 --warmup 2 \
  --curve none --profile coda+graph --timeout 180 --json $OUT/train_gpt2.json > $OUT/train_gpt2.log 2>&1
echo "train rc=$?"; tail -4 $OUT/train_gpt2.log
timeout 200 python benchmarks/gemm.py --cases plain,dgelu_bias_grad --rounds 5 --no-compile \
  --json $OUT/gemm_e.json > $OUT/gemm_e.log 2>&1
echo "gemm rc=$?"; grep -v Warn $OUT/gemm_e.log | tail -30
