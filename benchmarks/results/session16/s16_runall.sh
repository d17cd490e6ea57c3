#!/usr/bin/env bash
# Sixteenth session, first device call: run_all.sh on a freshly started machine (the compiled
# training modes now inside unpadded_batches: no explicit attention mask under Dynamo), by the
# fifteenth session's script: Liger's wheel, run_all.sh, its results tarred into $OUT.
exec bash benchmarks/results/session15/s15_runall.sh
