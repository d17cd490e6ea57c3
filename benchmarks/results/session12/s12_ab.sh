#!/usr/bin/env bash
# A/B: the dtypes= change (HEAD) against 9a07a0d (before it), training step, CODA modes
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
root=$PWD
t0=$SECONDS
for model in gpt2 bert llama; do
  for tree in before after; do
    left=$((560 - (SECONDS - t0)))
    [ $left -lt 60 ] && { echo "skip $model $tree (time)"; continue; }
    if [ $tree = before ]; then dir=$root/.exp/before; else dir=$root; fi
    (cd $dir && PYTHONPATH=$dir/src timeout $left python benchmarks/train.py --models $model --modes coda,coda+graph \
        --steps 12 --warmup 2 --curve none --timeout 200 --json $OUT/ab_${model}_${tree}.json) 2>&1 | grep -E "tokens/s|error|Error" | sed "s/^/$tree /"
    echo "$model $tree done at $((SECONDS-t0)) s"
  done
done
