#!/usr/bin/env bash
# A/B of the two branches on GPT-2 and BERT (coda+graph), each variant's src/ and benchmarks/
# from `git archive BRANCH src benchmarks/*.py` under variants/BRANCH (carried).
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
out=${OUT:-/tmp}
for v in ${VARIANTS:-main s35-try acs-main fls-main}; do
  prof=none; case " $PROFILE_VARIANTS " in *" $v "*) prof=coda+graph;; esac
  PYTHONPATH=$PWD/variants/$v/src timeout 170 python variants/$v/benchmarks/train.py --models ${MODELS:-gpt2,bert} \
    --modes coda+graph --steps 30 --warmup 2 --curve none --profile $prof --timeout 160 \
    --json "$out/$v.json" > "$out/$v.log" 2>&1
  echo "$v rc=$?"; grep -E "tokens/s|rror" "$out/$v.log" | head -4
done
