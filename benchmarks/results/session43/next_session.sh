#!/usr/bin/env bash
# Left by the forty-third session for the next one: call 2's script on main, GPT-2 in 15 rounds:
# the whole GPU suite (its last full run, call 2, was before the noted sums took the norm's
# parameter dtype and stopped inside custom ops; call 4 ran the HF, norm, linear and GPT-2
# files), then GPT-2 against compile+graph (calls 2 and 4 read 1.190x and 1.191x over 10 rounds).
#   run(command="bash benchmarks/results/session43/next_session.sh", timeout_s=600)
ROUNDS=15 TRAIN_LIMIT=290 exec bash "$(dirname "$0")/call2.sh"
