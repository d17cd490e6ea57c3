"""One line per launch of kernel_configs.py gpt2's JSON: CODA (heuristic), CODA's plain GEMM, cuBLAS, µs.
    python benchmarks/results/session42/launches_table.py gpt2_launches.json"""
import json
import sys

for row in json.load(open(sys.argv[1]))["rows"]:
    times = "  ".join(f"{key} {row[key]:7.1f}" if isinstance(row.get(key), float) else f"{key} {'-':>7s}"
                      for key in ("heuristic", "coda_plain", "cublas"))
    print(f"{row['case']:36s} {times}")
