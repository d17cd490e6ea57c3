#!/usr/bin/env bash
# Thirty-second session, third call: GPT-2 against torch.compile with CODA's default (main: tied
# embedding gradient, general head path) and with the exponential path as default
# (variants/exp), 30 timed steps; then the curve probe on seeds 3-5 (call 2 ran 0-2).
#   bash benchmarks/results/session32/third.sh   (on a GPU, from the repository root; carry
#   benchmarks/results/session32/variants)
export CODA_AUTOTUNE=0 PYTHONUNBUFFERED=1
V=$PWD/benchmarks/results/session32/variants
out=${OUT:-/tmp}
PYTHONPATH=$V/exp timeout 200 python benchmarks/train.py --models gpt2 --modes compile,coda+graph --steps 30 \
  --warmup 2 --curve none --profile none --timeout 190 --json "$out/gpt2_exp_vs_compile.json" \
  > "$out/gpt2_exp_vs_compile.log" 2>&1
echo "exp vs compile rc=$?"; tail -5 "$out/gpt2_exp_vs_compile.log"
PYTHONPATH=$PWD/src timeout 80 python benchmarks/train.py --models gpt2 --modes coda+graph --steps 30 \
  --warmup 2 --curve none --profile none --timeout 75 --json "$out/gpt2_main.json" > "$out/gpt2_main.log" 2>&1
echo "main rc=$?"; tail -3 "$out/gpt2_main.log"
PYTHONPATH=$PWD/src timeout 270 python benchmarks/results/session31/curve_probe.py --seeds 3,4,5 \
  --runs eager,coda_exp,coda_general --json "$out/curves.json" 2>&1 | grep -v -i warn
