#!/usr/bin/env bash
# Twenty-seventh session, call 2: the sweep again with 5- and 6-deep rings (kernel_configs.py
# GPT2_CONFIGS), then GPT-2's captured step with the heuristic's configurations and the sweep's
# fastest per launch, alternated, one process each.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
D=benchmarks/results/session27
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
timeout 330 python benchmarks/kernel_configs.py gpt2 --json $OUT/gpt2_configs.json > $OUT/gpt2_configs.log 2>&1
echo "sweep rc=$?"; grep "^{" $OUT/gpt2_configs.log | cut -c1-600
probe() {  # variant tag
  timeout 60 python $D/config_probe.py --variant=$1 --sweep=$OUT/gpt2_configs.json --json=$OUT/$2.json > $OUT/$2.log 2>&1
  echo "== $2 rc=$?"; grep -E "^\{|Error" $OUT/$2.log | cut -c1-700
}
probe heuristic heuristic1; probe best best1
probe heuristic heuristic2; probe best best2
cd $OUT && tar czf probes.tgz *.json *.log && rm -f heuristic*.json best*.json pingpong*.json *.log
