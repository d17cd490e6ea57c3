#!/usr/bin/env bash
# Forty-eighth session, third call, on an 80 GB H100: run_all.sh's training stage (every mode,
# each model's runs a group of their own below 130 GiB of GPU memory), results copied to $OUT.
#   run(command="bash benchmarks/results/session48/call3.sh", carry=[".whl"], timeout_s=600)
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
out=${OUT:-/tmp}
bash benchmarks/run_all.sh train > "$out/run_all_train.log" 2>&1
echo "run_all rc=$? at ${SECONDS}s"
cp benchmarks/results/train.json benchmarks/results/status.txt benchmarks/results/gpu_clocks.log "$out/"
cp docs/img/train_loss_gpt2.png "$out/" 2> /dev/null
grep -E "rc=|tokens/s|round by round|^\| (gpt2|llama|bert)" "$out/run_all_train.log" | cut -c1-220 | head -60
