#!/usr/bin/env bash
# Thirty-ninth session, call 5: call 4 with CODA's autotuning on, its default for users (each shape
# times its candidate configurations at its first launch, the plain GEMM's too).
CODA_AUTOTUNE=1 exec bash "$(dirname "$0")/call3.sh"
