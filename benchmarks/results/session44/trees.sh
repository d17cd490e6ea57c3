#!/usr/bin/env bash
# Copies of this checkout with the forty-fourth session's patches applied, for train.py --tree and
# the tests: /tmp/rows (rows_on_warps.patch: LayerNorm's one-pass backward with each row on one
# warp), /tmp/partials (that and partial_stats.patch: GPT-2's and BERT's norm statistics as
# coda.Partials, and fewer finishing kernels otherwise) and /tmp/partials_only (the same on
# main's LayerNorm kernel: partial_stats_main.patch). LN_CONFIG="ROWS,warps,per_sm,STAGES" (the
# probe's "best:" line) replaces the narrow rows' configuration in the first two.
set -e
patches=$PWD/benchmarks/results/session44
for tree in rows partials partials_only; do
    rm -rf "/tmp/$tree" && mkdir "/tmp/$tree" && cp -r src tests benchmarks docs pyproject.toml "/tmp/$tree/"
done
(cd /tmp/rows && git apply "$patches/rows_on_warps.patch")
(cd /tmp/partials && git apply "$patches/rows_on_warps.patch" "$patches/partial_stats.patch")
(cd /tmp/partials_only && git apply "$patches/partial_stats_main.patch")
if [ -n "${LN_CONFIG:-}" ]; then
    sed -i "s/rows, warps, per_sm, stages = 4, 4, 2, 3/rows, warps, per_sm, stages = ${LN_CONFIG//,/, }/" \
        /tmp/rows/src/coda/nn/layer_norm_grad.py /tmp/partials/src/coda/nn/layer_norm_grad.py
fi
grep -h "rows, warps, per_sm, stages = [0-9]" /tmp/rows/src/coda/nn/layer_norm_grad.py
