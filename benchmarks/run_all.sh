#!/usr/bin/env bash
# Every benchmark of docs/benchmarks.md on one GPU, results in benchmarks/results/, plots in docs/img/.
# Not yet under 10 minutes: micro.py with torch.compile and max-autotune at three sizes, and
# train.py with every mode, each take longer than that (docs/benchmarks.md).
set -euo pipefail
cd "$(dirname "$0")/.."
python benchmarks/launch_counts.py
python benchmarks/cross_entropy_memory.py
python benchmarks/micro.py
python benchmarks/train.py --json benchmarks/results/train.json
python benchmarks/report.py
