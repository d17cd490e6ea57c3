#!/usr/bin/env bash
# Fiftieth session, call 2: the norms' one-pass backward with a register prefetch
# (variants/lnpf/layer_norm_grad.py) against main's kernel, ln_prefetch_probe.py; then GPT-2's
# training step with the probe's fastest choice at 768 columns (variants/pftree: src with that
# kernel, its config read from CODA_LN_PF768 / CODA_LN_PF2048 / CODA_LN_PF4096) beside main and
# compile+graph, interleaved rounds.
#   variants/lnpf and variants/pftree as made in the session (benchmarks-log.md, fiftieth session)
#   run(command="bash benchmarks/results/session50/call2.sh", carry=["variants"], timeout_s=595)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader
PYTHONPATH=$PWD/src timeout 230 python benchmarks/results/session50/ln_prefetch_probe.py > "$out/ln_probe.log" 2>&1
echo "probe rc=$? at ${SECONDS}s"; grep -v "^  lnpf" "$out/ln_probe.log" | cut -c1-150; grep -A4 "xn stored" "$out/ln_probe.log" | grep lnpf | cut -c1-120
best=$(grep "^best768:" "$out/ln_probe.log" | cut -d' ' -f2)
for w in 768 2048 4096; do
    b=$(grep "^best$w:" "$out/ln_probe.log" | cut -d' ' -f2); [ -n "$b" ] && export CODA_LN_PF$w=$b
done
env | grep CODA_LN_PF
[ -z "$best" ] && exit 0
timeout $((588 - SECONDS)) python benchmarks/train.py --models gpt2 --modes compile+graph,coda+graph \
    --tree pf=variants/pftree/src --pad-mm always --steps 20 --rounds 6 --warmup 3 --curve none \
    --profile none --timeout 300 --json "$out/train_gpt2.json" > "$out/train_gpt2.log" 2>&1
echo "gpt2 rc=$? at ${SECONDS}s"; grep -E "tokens/s|round by round|paired|rror" "$out/train_gpt2.log" | head -12
