#!/usr/bin/env bash
# Fiftieth session, call 5 (call 4 was lost with its machine; 362 s of device time left): the
# micro suite's two norm-folded linears on main (the norms' backward prefetch, `linear` without
# an epilogue on cuBLAS) beside eager, torch.compile and Liger.
#   run(command="bash benchmarks/results/session50/call5.sh", carry=[".whl"], timeout_s=230)
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader
timeout 215 python benchmarks/micro.py --ops layer_norm_linear,rms_norm_linear --max-autotune '' \
    --json "$out/micro.json" > "$out/micro.log" 2>&1
echo "micro rc=$? at ${SECONDS}s"; grep -A8 "replayed from CUDA" "$out/micro.log" | cut -c1-130
