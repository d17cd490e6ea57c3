#!/usr/bin/env bash
# Thirtieth session, fifth call: the fourth call's commands again (GPU tests of the cross-entropy
# and the GPT-2 models, head_probe.py, GPT-2 against torch.compile), after the forward came to sum
# E = exp(logit - c) for lse: one exponential an element.
exec bash "$(dirname "$0")/s30_fourth.sh"
