#!/usr/bin/env bash
# Left by the forty-fourth session (no device machine was lent to it) for the next one.
#   run(command="bash benchmarks/results/session44/next_session.sh", timeout_s=600)
# 1. The whole GPU suite on main (pending since the 43rd session: its last change, notes_from's
#    dtype and custom-op guards, ran on the CPU only).
# 2. LayerNorm's one-pass backward with each row on one warp (rows_on_warps.patch, applied to a
#    copy of src/ in /tmp/rows) against main's kernel: a sweep of its choices at GPT-2's shape
#    and main's default at wider rows, errors against float64, then GPT-2's step A/B in one
#    process (ln_backward_probe.py). Main's kernel: 37.6 µs at 16384 x 768 with dres (37th
#    session), about 3.1 TB/s where a copy moves 4.3.
# Then, if the patch wins: git apply it, put the probe's fastest choice in its config() (FILL IN
# line), run the norms' / GPT / HF GPU tests and GPT-2 and BERT against compile+graph (call 2 in
# benchmarks/results/session44/README.md).
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
here=$PWD
timeout 280 python -m pytest -q -n 12 -p no:cacheprovider -rf tests/gpu tests/integrations/test_compile_gpu.py \
    > "$out/gpu_tests.log" 2>&1
echo "gpu tests rc=$?"; grep -E "^FAILED|passed|failed" "$out/gpu_tests.log" | cut -c1-250 | head -20
rm -rf /tmp/rows && mkdir /tmp/rows && cp -r src tests /tmp/rows/ \
    && (cd /tmp/rows && git apply "$here/benchmarks/results/session44/rows_on_warps.patch") && echo "patch applied"
timeout 290 python benchmarks/results/session44/ln_backward_probe.py --variant /tmp/rows/src/coda/nn/layer_norm_grad.py \
    > "$out/ln_backward_probe.log" 2>&1
echo "probe rc=$?"; grep -v Warning "$out/ln_backward_probe.log" | grep -E "x768|fastest|rows  |main  |GPT-2|total|failed" | head -60
