"""One CODA kernel under Nsight Compute, and the stall samples of its SASS by region.

    ncu --clock-control none -k regex:coda_gemm --launch-skip 3 --launch-count 1 \\
        --section WarpStateStats --section SourceCounters -o REPORT \\
        python benchmarks/profile_kernel.py run CASE CONFIG
    ncu -i REPORT.ncu-rep --page source --csv --print-source sass > source.csv
    python benchmarks/profile_kernel.py stalls source.csv LABEL [source.csv LABEL ...]

`run` launches benchmarks/gemm.py's CASE at 16384 x 3072 x 768 (bf16) four times through a ready
Plan in CONFIG, e.g. "Config(128, 128, 64, 4, 4, split_epilogue=4, pingpong=True)".
`stalls` sums the sampled stall reasons of the whole kernel and of
each ping-pong warpgroup's epilogue code: from just after the warpgroup's wgmma instructions to
300 instructions before the next warpgroup's (the first) or 100 before the end (the second).
"""

from __future__ import annotations

import collections
import csv
import sys

SHAPE = (16384, 3072, 768)


def run(case: str, config_text: str) -> None:
    import torch
    from gemm import CASES, operands  # puts src/ on the path for coda

    import coda
    from coda.codegen.tuning import Config

    m, n, k = SHAPE
    prog = coda.compile(CASES[case]["coda"])
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k**0.5
    used = {name: v for name, v in operands(m, n).items() if name in prog.ir.params}
    launch = prog.bind(a, w.T, seed=1, **used)
    config = eval(config_text, {"Config": Config})
    plan, _ = prog.triton.start(launch, config)
    for _ in range(4):
        plan.run(launch.a, launch.b, launch.values, None, launch.seed)
    torch.cuda.synchronize()


def stalls(path: str, label: str) -> str:
    rows = list(csv.reader(open(path)))
    header, sass = rows[1], [r for r in rows[2:] if len(r) >= len(rows[1])]
    column = {name: i for i, name in enumerate(header)}
    reasons = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]
    wgmma = [i for i, r in enumerate(sass) if "HGMMA" in r[column["Source"]]]
    groups = [[wgmma[0]]]   # one run of wgmma instructions per warpgroup
    for i in wgmma[1:]:
        if i - groups[-1][-1] < 200:
            groups[-1].append(i)
        else:
            groups.append([i])
    regions = {"whole kernel": (0, len(sass)),
               "warpgroup 0 epilogue": (groups[0][-1] + 15, groups[1][0] - 300),
               "warpgroup 1 epilogue": (groups[1][-1] + 15, len(sass) - 100)}
    lines = [f"## {label}: {len(sass)} SASS instructions"]
    for name, (lo, hi) in regions.items():
        count = collections.Counter()
        for r in sass[lo:hi]:
            for reason in reasons:
                count[reason[6:]] += int(r[column[reason]] or 0)
        total = sum(count.values())
        lines.append(f"{name} [{lo}, {hi}): {total} samples; "
                     + ", ".join(f"{k} {100 * v / total:.1f}%" for k, v in count.most_common(6)))
    return "\n".join(lines)


if __name__ == "__main__":
    if sys.argv[1] == "run":
        run(sys.argv[2], sys.argv[3])
    else:
        pairs = sys.argv[2:]
        print("\n\n".join(stalls(path, label) for path, label in zip(pairs[::2], pairs[1::2], strict=True)))
