#!/usr/bin/env bash
# Twenty-seventh session, call 3: the ping-pong kernel reads a Concat A in pieces. GPU tests of
# it (Concat GEMMs in both mainloops; the Triton-kernel tests), then LayerNorm's dxhat and dw
# GEMMs of GPT-2 (A = the q/k/v gradients in place) in each configuration, and GPT-2's captured
# step with the heuristic's configurations and the sweep's fastest, alternated.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
D=benchmarks/results/session27
timeout 170 python -m pytest -q -x tests/gpu/test_concat_gpu.py tests/gpu/test_triton_gpu.py > $OUT/gpu_tests.txt 2>&1
echo "gpu tests rc=$?"; tail -4 $OUT/gpu_tests.txt
timeout 150 python benchmarks/kernel_configs.py gpt2 --cases ln_dxhat_16384x768x2304,ln_dw_2304x768x16384 \
  --json $OUT/gpt2_concat_configs.json > $OUT/gpt2_concat_configs.log 2>&1
echo "sweep rc=$?"; grep "^{" $OUT/gpt2_concat_configs.log | cut -c1-900
probe() {  # variant tag
  timeout 60 python $D/config_probe.py --variant=$1 --sweep=$OUT/gpt2_concat_configs.json --json=$OUT/$2.json > $OUT/$2.log 2>&1
  echo "== $2 rc=$?"; grep -E "^\{|Error" $OUT/$2.log | cut -c1-700
}
probe heuristic heuristic1; probe best best1
probe heuristic heuristic2; probe best best2
cd $OUT && tar czf probes.tgz heuristic* best* gpt2_concat_configs.log && rm -f heuristic* best* *.log
