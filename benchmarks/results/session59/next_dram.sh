#!/usr/bin/env bash
# For the next session (prepared in the fifty-ninth, not run; about a minute on a warm machine):
# does a tile operand's fetch push A's and B's lines out of L2? Nsight Compute's DRAM bytes and
# L2 hit rate of the plain ping-pong GEMM, (c) residual + row sums and (b) at GPT-2's fc1 shape
# and at 16384x8192x2048 (clock_probe.py --profile, the third launch of each kernel; METRICS="..."
# asks Nsight Compute for others). If (c)
# reads no more from DRAM than plain's bytes plus its residual's (100.7 MB at K = 768, 268.4 MB at
# K = 2048), the operand evicts nothing and its cost is the DRAM's own (docs/performance.md,
# fifty-seventh and fifty-eighth sessions); more, and the tile order is where to look.
#   run(command="bash benchmarks/results/session59/next_dram.sh", timeout_s=300)
export PYTHONUNBUFFERED=1 CODA_AUTOTUNE=0 PYTHONPATH=$PWD/src
out=${OUT:-/tmp}
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu | head -1)
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee "$out/gpu.txt"
for shape in ${SHAPES:-16384x3072x768 16384x8192x2048}; do
    timeout 120 "$NCU" --clock-control none -k regex:coda --launch-count 9 --csv \
        --metrics ${METRICS:-gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct} \
        python benchmarks/results/session59/clock_probe.py --shape $shape \
        --profile plain,residual_rowsumsq,bias_gelu_dropout_residual > "$out/dram_$shape.csv" 2> "$out/dram_$shape.err"
    echo "$shape rc=$? at ${SECONDS}s"; tail -1 "$out/dram_$shape.err"
    python - "$out/dram_$shape.csv" <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
head, data = rows[0], rows[1:]
col = {name: head.index(name) for name in ("ID", "Kernel Name", "Metric Name", "Metric Unit", "Metric Value")}
for r in data:   # launches 0-8: three of each case; the third of each is 2, 5, 8
    if int(r[col["ID"]]) % 3 == 2:
        print(r[col["ID"]], r[col["Metric Name"]], r[col["Metric Value"]], r[col["Metric Unit"]])
PY
done
