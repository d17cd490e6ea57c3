"""Where the warps of call 3's kernels wait: each SASS branch back into an mbarrier try-wait loop
takes the barrier of the nearest SYNCS.PHASECHK before it; the barriers are told apart by their
shared-memory offsets, in the order the kernel allocates them: the ring's `ready` and `empty`
(each indexed by the slot from its base offset), then `turn`[0..1], then `tiles_ready`[0..1].
Samples of Nsight Compute's warp-state sampling, proportional to the time warps spend at an
instruction.

    python benchmarks/results/session61/wait_table.py benchmarks/results/session61/call3
    python benchmarks/results/session61/wait_table.py benchmarks/results/session61/call4
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from stall_table import rows as source_rows

SAMPLES = "Warp Stall Sampling (All Samples)"


def waits(path: Path) -> dict[str, float]:
    _, table = source_rows(path)
    offsets, rows = {}, []
    barrier = None
    for row in table:
        text = row["Source"].strip()
        found = re.search(r"PHASECHK\S* P\d, \[(?:R\d+\+)?(?:UR\d+\+)?(0x[0-9a-f]+)\]", text)
        if found:
            barrier = int(found.group(1), 16)
            offsets[barrier] = offsets.get(barrier, 0)
        rows.append((float(row[SAMPLES] or 0), text, barrier if "BRA" in text else None))
    kinds = ["ready (A/B in the ring)", "empty (loader: ring full)"] + [
        "turn (the other warpgroup's K loop)"] * 2 + ["tiles_ready (the operand)"] * 2
    names = dict(zip(sorted(offsets), kinds[:len(offsets)], strict=True))
    result = {"total": sum(s for s, _, _ in rows)}
    for samples, text, barrier in rows:
        key = (names[barrier] if barrier is not None
               else "NOP (idle warps)" if text == "NOP" else "everything else")
        result[key] = result.get(key, 0) + samples
    return result


def main() -> None:
    folder = Path(sys.argv[1])
    variants = sorted(path.name[:-len("_sass.csv")] for path in folder.glob("*_sass.csv"))
    found = {v: waits(folder / f"{v}_sass.csv") for v in variants}
    keys = sorted({k for r in found.values() for k in r}, key=lambda k: -found[variants[-1]].get(k, 0))
    print("| samples | " + " | ".join(variants) + " |")
    print("| --- |" + " --- |" * len(variants))
    for key in keys:
        print(f"| {key} | " + " | ".join(f"{found[v].get(key, 0):.0f}" for v in variants) + " |")


if __name__ == "__main__":
    main()
