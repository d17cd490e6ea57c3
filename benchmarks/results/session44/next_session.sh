#!/usr/bin/env bash
# Left by the forty-fourth session (no device machine was lent to it) for the next one: call 1.
#   run(command="bash benchmarks/results/session44/next_session.sh", timeout_s=600)
# 1. The whole GPU suite on main (its last full run was before the 43rd session's notes_from
#    change; main now also has coda.Partials / unfinished=, whose GPU test is new, and the 45th
#    session's Mistral / Qwen2 / Qwen3 and autocast tests in test_hf_gpu.py).
# 2. LayerNorm's one-pass backward with each row on one warp (rows_on_warps.patch) against
#    main's: the sweep of its choices at GPT-2's shape, main's default at wider rows, errors
#    against float64 (ln_backward_probe.py; main's kernel: 37.6 µs at 16384 x 768 with dres in
#    the 37th session, about 2.7 TB/s where a copy moves 4.3). Its last line, "best: ...", is
#    LN_CONFIG for call 2.
# Then call 2 (call2.sh, README.md): the patched trees' GPU tests and GPT-2, main and the three
# trees against compile+graph; call 3 (call3.sh): BERT the same way.
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
timeout 300 python -m pytest -q -n 12 -p no:cacheprovider -rf tests/gpu tests/integrations/test_compile_gpu.py tests/examples \
    > "$out/gpu_tests.log" 2>&1
echo "gpu tests (main) rc=$?"; grep -E "^FAILED|passed|failed" "$out/gpu_tests.log" | cut -c1-250 | head -20
bash benchmarks/results/session44/trees.sh > "$out/trees.log" 2>&1; echo "trees rc=$?"; cat "$out/trees.log"
timeout 260 python benchmarks/results/session44/ln_backward_probe.py --variant /tmp/rows/src/coda/nn/layer_norm_grad.py \
    > "$out/ln_backward_probe.log" 2>&1
echo "probe rc=$?"; grep -v Warning "$out/ln_backward_probe.log" | grep -E "x[0-9]+ xn|  main|  rows  None|  rows  \(4, 4, 2, 3\)|fastest|best|failed" | head -40
