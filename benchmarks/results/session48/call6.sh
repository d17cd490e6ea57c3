#!/usr/bin/env bash
# Forty-eighth session, sixth call: layer_norm_linear without given row sums as LayerNorm's
# one-pass forward then the linear layer (this tree) against the fold (variants/fold: the same
# tree with that branch off), in the micro suite (both without torch.compile and Liger: 270 s of device time were left; the peers' times are call 5's).
#   mkdir -p variants/fold/benchmarks && cp benchmarks/*.py variants/fold/benchmarks/ &&
#   cp -r src variants/fold/src && sed -i 's/    if rowsum is None and split is None and layer_norm_one_pass(x, as_rows(x)\[0\]):/    if False:/' variants/fold/src/coda/ops/norms.py
#   run(command="bash benchmarks/results/session48/call6.sh", carry=["variants", ".whl"], timeout_s=420)
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0
out=${OUT:-/tmp}
timeout 70 python variants/fold/benchmarks/micro.py --ops layer_norm_linear --no-compile --no-liger --json "$out/micro_fold.json" \
    > "$out/micro_fold.log" 2>&1
echo "micro fold rc=$? at ${SECONDS}s"; grep -A8 "replayed from CUDA" "$out/micro_fold.log" | cut -c1-150
timeout 70 python benchmarks/micro.py --ops layer_norm_linear --no-compile --no-liger --json "$out/micro_new.json" \
    > "$out/micro_new.log" 2>&1
echo "micro new rc=$? at ${SECONDS}s"; grep -A8 "replayed from CUDA" "$out/micro_new.log" | cut -c1-150
