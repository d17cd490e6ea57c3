"""Warp stall samples of call1.sh's Nsight Compute source pages, per SASS opcode and per
instruction, side by side for the variants profiled.

    python benchmarks/results/session61/stall_table.py DIR [plain c l2 nofetch]
"""

from __future__ import annotations

import csv
import re
import sys
from collections import Counter
from pathlib import Path


def rows(path: Path) -> tuple[list[str], list[dict]]:
    lines = path.read_text(errors="replace").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('"#') or "Source" in line[:40])
    table = list(csv.DictReader(lines[start:]))
    return list(table[0].keys()) if table else [], table


def number(text: str) -> float:
    try:
        return float(text.replace(",", ""))
    except (ValueError, AttributeError):
        return 0.0


def summary(path: Path) -> tuple[Counter, list[tuple[float, str, str]], float]:
    columns, table = rows(path)
    source = next(c for c in columns if c.strip('"# ').startswith("Source"))
    samples = next(c for c in columns if "Warp Stall Sampling (All" in c)
    by_opcode, by_instruction = Counter(), []
    for row in table:
        count = number(row[samples])
        opcode = re.sub(r"^@!?U?P\w+\s+", "", row[source].strip()).split(" ")[0]
        by_opcode[opcode] += count
        by_instruction.append((count, row.get(columns[0], ""), row[source].strip()[:70]))
    total = sum(by_opcode.values())
    return by_opcode, sorted(by_instruction, reverse=True), total


def main() -> None:
    folder = Path(sys.argv[1])
    variants = sys.argv[2:] or ["plain", "c", "l2", "nofetch"]
    found = {v: summary(folder / f"{v}_sass.csv") for v in variants if (folder / f"{v}_sass.csv").exists()}
    opcodes = Counter()
    for by_opcode, _, _ in found.values():
        opcodes.update(by_opcode)
    print("| opcode | " + " | ".join(f"{v} samples (%)" for v in found) + " |")
    print("| --- |" + " --- |" * len(found))
    for opcode, _ in opcodes.most_common(20):
        cells = [f"{by[opcode]:.0f} ({100 * by[opcode] / total:.1f})" for by, _, total in found.values()]
        print(f"| {opcode} | " + " | ".join(cells) + " |")
    print("| total | " + " | ".join(f"{total:.0f}" for _, _, total in found.values()) + " |")
    for v, (_, instructions, total) in found.items():
        print(f"\n{v}: top instructions")
        for count, address, text in instructions[:15]:
            print(f"  {100 * count / total:5.1f}%  {address}  {text}")


if __name__ == "__main__":
    main()
