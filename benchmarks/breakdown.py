"""Print the training rows of benchmarks/train.py's JSON and, where a row was profiled, its GPU
time per class, its longest kernels and where the GPU sat idle: what the session scripts in
benchmarks/results/ show after a training run.

    python benchmarks/breakdown.py $OUT/train.json [more.json ...] [--top 25]
"""

import argparse
import json
import sys
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+")
    parser.add_argument("--top", type=int, default=25, help="kernels listed per profiled row")
    args = parser.parse_args()
    for path in args.files:
        try:
            rows = json.loads(Path(path).read_text())["rows"]
        except (OSError, ValueError, KeyError, TypeError) as err:
            sys.exit(f"breakdown.py: {path}: not a train.py JSON with rows ({err})")
        for row in rows:
            classes = row.get("breakdown") or {}
            print(row["model"], row["mode"], round(row.get("tokens_per_s") or 0), row.get("step_ms"),
                  {k: round(v) for k, v in classes.items() if k not in ("top", "idle_after")})
            for name, kind, us, launches in classes.get("top", [])[:args.top]:
                print("   ", name[:70], kind, round(us), launches)
            if classes.get("idle_after"):
                print("    GPU idle after (µs):")
            for name, us in classes.get("idle_after", []):
                print("       ", name[:70], round(us))


if __name__ == "__main__":
    main()
