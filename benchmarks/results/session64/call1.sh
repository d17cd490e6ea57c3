#!/usr/bin/env bash
# Sixty-fourth session, call 1: on an H200 (the issues' GPU), the fifty-ninth session's prepared
# run (GPT-2 against compile+graph in 6 interleaved rounds, then issue 8's table); on any other
# GPU the sixty-third session's call 3 (cuBLASLt's epilogues, each in the fastest algorithm of
# its heuristic's eight).
#   run(command="bash benchmarks/results/session64/call1.sh", timeout_s=598)
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader)
case "$gpu" in
    *H200*) bash benchmarks/results/session59/next_h200.sh ;;
    *) bash benchmarks/results/session63/call3.sh ;;
esac
