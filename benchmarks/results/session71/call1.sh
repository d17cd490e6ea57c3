#!/usr/bin/env bash
# Seventy-first session, call 1: on an H200 the readings only it gives (session70/next_session.sh:
# GPT-2 against compile+graph, then issue 8's fast-path table); on another GPU the whole GPU suite
# and the HF models' tests on this session's starting build (session70/call2.sh, whose H200
# branch is not taken there).
#   run(command="cd .snap && bash benchmarks/results/session71/call1.sh", kind="nvidia-h200",
#       carry=[".snap"], timeout_s=595)
out=${OUT:-/tmp}
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
    OUT=$out bash benchmarks/results/session70/next_session.sh
else
    OUT=$out bash benchmarks/results/session70/call2.sh
fi
