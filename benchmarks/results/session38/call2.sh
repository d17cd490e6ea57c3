#!/usr/bin/env bash
# Thirty-eighth session, call 2: where the PDL signal goes. variants/pdl-late (signal from the
# maps, finishing and LayerNorm kernels, not the persistent GEMMs) with CODA_PDL=0 (off) and =1,
# variants/pdl-wait (no signal: the next kernel launches as this one exits); GPT-2 and BERT
# `coda+graph`, interleaved, twice where time allows.
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
out=${OUT:-/tmp}
run() {  # name variant pdl
  CODA_PDL=$3 PYTHONPATH=$PWD/variants/$2/src timeout 130 python variants/$2/benchmarks/train.py --models gpt2,bert \
    --modes coda+graph --steps 40 --warmup 2 --curve none --profile none --timeout 120 \
    --json "$out/$1.json" > "$out/$1.log" 2>&1
  echo "$1 rc=$?"; grep -E "tokens/s|rror" "$out/$1.log" | head -3
}
run off1 pdl-late 0; run late1 pdl-late 1; run wait1 pdl-wait 1
run off2 pdl-late 0; run late2 pdl-late 1
