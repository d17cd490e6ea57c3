#!/usr/bin/env bash
# Thirty-ninth session, call 4: call 3's command again, once gemm.py paired each case in ABBA order
# (plain, fused, fused, plain; reversed in odd rounds) with the plain kernel paired with itself too
# (commit f51f388; call 3 had timed plain, then fused, every round).
exec bash "$(dirname "$0")/call3.sh"
