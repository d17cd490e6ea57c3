#!/usr/bin/env bash
# Sixty-fourth session, call 2: on an H200, the fifty-ninth session's prepared run (as call 1).
# On any other GPU: is cuBLAS's heuristic pick its fastest plain GEMM? Call 1 read the fastest of
# cuBLASLt's eight offered algorithms 102 µs at 16384x3072x768 against the first's 112 (667 against
# 814 at 16384x8192x2048), from single, unpaired timings. Here each offered algorithm is paired
# with the first (lt_epilogues.cu --algos), then gemm.py times CODA's plain GEMM beside cuBLAS's.
#   run(command="bash benchmarks/results/session64/call2.sh", timeout_s=598)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
gpu=$(nvidia-smi --query-gpu=name,power.limit --format=csv,noheader); echo "$gpu" | tee "$out/gpu.txt"
case "$gpu" in *H200*) exec bash benchmarks/results/session59/next_h200.sh ;; esac
shapes="16384x3072x768 16384x768x3072 8192x11008x4096 8192x4096x11008 16384x8192x2048 4096x4096x4096 8192x8192x8192"
nvcc -O2 -arch=sm_90 -o /tmp/lt_epilogues benchmarks/results/session63/lt_epilogues.cu -lcublasLt \
    > "$out/lt_build.log" 2>&1 \
    && timeout 240 /tmp/lt_epilogues --algos $shapes > "$out/lt_algos.jsonl" 2>&1
echo "lt rc=$? at ${SECONDS}s"; grep -v plain_algo "$out/lt_algos.jsonl" | head -3
python - "$out/lt_algos.jsonl" <<'PY'
import json, sys
best = {}
for line in open(sys.argv[1]):
    row = json.loads(line)
    if row.get("case") == "plain_algo":
        key = tuple(row["shape"])
        best[key] = min(best.get(key, (9.0, 0)), (row["over_first_paired"], row["index"]))
for shape, (ratio, index) in best.items():
    print(shape, f"fastest offered algorithm {index}: {ratio:.3f} of the first's time")
PY
timeout $((590 - SECONDS)) python benchmarks/gemm.py --rounds 3 --no-compile --cases plain \
    --json "$out/gemm_plain.json" > "$out/gemm_plain.log" 2>&1
echo "gemm rc=$? at ${SECONDS}s"; python benchmarks/report.py --gemm "$out/gemm_plain.json" 2>&1 | tail -12
