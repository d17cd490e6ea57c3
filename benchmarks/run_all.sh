#!/usr/bin/env bash
# Every benchmark of docs/benchmarks.md on one GPU in under 10 minutes: results in
# benchmarks/results/, plots in docs/img/.
#   bash benchmarks/run_all.sh
# Each stage has a time limit (seconds, below) and writes its JSON as it goes, so a stage that
# runs out keeps what it measured and the next one starts on time; status.txt says which stages
# finished. On a fresh machine most of the time is compilation (torch.compile, Liger's and CODA's
# Triton kernels); the training stage compiles one model's runs side by side and times them one
# at a time (benchmarks/train.py), which is what fits the whole matrix (micro: 7 ops x 3 sizes x
# 6 implementations; training: 3 models x 7 modes and the loss curve) in the budget.
set -uo pipefail
cd "$(dirname "$0")/.."
# CODA takes its heuristic kernel configurations (autotuning every shape would not fit the budget)
export PYTHONPATH=$PWD/src:${PYTHONPATH:-} PYTHONUNBUFFERED=1 CODA_AUTOTUNE=${CODA_AUTOTUNE:-0}
mkdir -p benchmarks/results
: > benchmarks/results/status.txt
stage() {  # stage NAME SECONDS COMMAND...
    local name=$1 limit=$2 began=$SECONDS; shift 2
    timeout "$limit" "$@" 2>&1 | tee "benchmarks/results/$name.log"
    echo "$name: rc=${PIPESTATUS[0]} in $((SECONDS - began)) s (limit $limit)" | tee -a benchmarks/results/status.txt
}
stage launch_counts 55 python benchmarks/launch_counts.py
stage cross_entropy 45 python benchmarks/cross_entropy_memory.py
stage micro 225 python benchmarks/micro.py --max-autotune ''
stage train 260 python benchmarks/train.py --models gpt2,llama,bert \
    --modes eager,compile,liger,eager+graph,coda,coda+compile,coda+graph --steps 8 --warmup 2 --curve gpt2 \
    --profile eager,coda,coda+graph --timeout 260
stage report 15 python benchmarks/report.py
