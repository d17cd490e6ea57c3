"""One CODA kernel under Nsight Compute, and the stall samples of its SASS by region.

    ncu --clock-control none -k regex:coda_gemm --launch-skip 3 --launch-count 1 \\
        --section WarpStateStats --section SourceCounters -o REPORT \\
        python benchmarks/profile_kernel.py run CASE CONFIG
    ncu -i REPORT.ncu-rep --page source --csv --print-source sass > source.csv
    python benchmarks/profile_kernel.py stalls source.csv LABEL [source.csv LABEL ...]

`run` launches benchmarks/gemm.py's CASE at 16384 x 3072 x 768 (bf16) four times through a ready
Plan in CONFIG, e.g. "Config(128, 128, 64, 4, 4, split_epilogue=4, pingpong=True)".
`stalls` sums the sampled stall reasons and executed instructions of each part of the kernel
(each MMA warpgroup's set-up, K loop and epilogue; the loader; the wait loops).
"""

from __future__ import annotations

import collections
import csv
import sys

SHAPE = (16384, 3072, 768)


def run(case: str, config_text: str, shape: tuple[int, int, int] = SHAPE, launches: int = 4) -> None:
    import torch
    from gemm import CASES, inputs, used_operands  # puts src/ on the path for coda

    import coda
    from coda.codegen.tuning import Config

    prog = coda.compile(CASES[case]["coda"])
    a, w, ops = inputs(*shape)
    launch = prog.bind(a, w.T, seed=1, **used_operands(prog, ops))
    config = eval(config_text, {"Config": Config})
    plan, _ = prog.triton.start(launch, config)
    for _ in range(launches):
        plan.run(launch.a, launch.b, launch.values, None, launch.seed)
    torch.cuda.synchronize()


def stalls(path: str, label: str) -> str:
    """The sampled stall reasons and executed instructions of each part of a ping-pong kernel's
    SASS: per MMA warpgroup its set-up (prefetch, turn wait), K loop and epilogue, the loader
    (with the idle warps of its warpgroup), and the wait loops placed after EXIT."""
    rows = list(csv.reader(open(path)))
    header, sass = rows[1], [r for r in rows[2:] if len(r) >= len(rows[1])]
    column = {name: i for i, name in enumerate(header)}
    source = [r[column["Source"]].strip() for r in sass]
    reasons = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]
    wgmma = [i for i, s in enumerate(source) if "HGMMA" in s]
    groups = [[wgmma[0]]]   # one run of wgmma instructions per warpgroup: the worker's first
    for i in wgmma[1:]:
        if i - groups[-1][-1] < 200:
            groups[-1].append(i)
        else:
            groups.append([i])
    end = next(i for i, s in enumerate(source) if s.startswith("EXIT"))
    # the loader partition starts by giving its registers back down to LOAD_REGS = 40 (0x28)
    loader = next(i for i, s in enumerate(source) if "USETMAXREG.DEALLOC.CTAPOOL 0x28" in s)

    def part(i: int) -> str:
        if i > end:
            return "wait loops"
        if i < groups[0][0] - 20:
            return "warpgroup 1 set-up"
        if i <= groups[0][-1] + 20:
            return "warpgroup 1 K loop"
        if i < loader:
            return "warpgroup 1 epilogue"
        if i < groups[1][0] - 20:
            return "loader, idle warps, warpgroup 0 set-up"
        return "warpgroup 0 K loop" if i <= groups[1][-1] + 20 else "warpgroup 0 epilogue"

    samples, executed = collections.defaultdict(collections.Counter), collections.Counter()
    for i, r in enumerate(sass):
        samples[part(i)].update({reason[6:]: int(r[column[reason]] or 0) for reason in reasons})
        executed[part(i)] += int(r[column["Instructions Executed"]] or 0)
    lines = [f"## {label}: {len(sass)} SASS instructions"]
    for name, count in samples.items():
        total = sum(count.values())
        lines.append(f"{name}: {total} samples, {executed[name]} warp instructions; "
                     + ", ".join(f"{k} {100 * v / max(total, 1):.0f}%" for k, v in count.most_common(5)))
    return "\n".join(lines)


if __name__ == "__main__":
    command = sys.argv[1:]
    if command[:1] in (["-h"], ["--help"]):
        sys.exit(print(__doc__))
    if not ((command[:1] == ["run"] and len(command) == 3)
            or (command[:1] == ["stalls"] and len(command) >= 3 and len(command) % 2)):
        sys.exit(f"usage:\n{__doc__}")   # status 1: the message on stderr
    if sys.argv[1] == "run":
        import side_by_side  # benchmarks/, beside this script

        side_by_side.require_gpu("benchmarks/profile_kernel.py run")
        run(sys.argv[2], sys.argv[3])
    else:
        pairs = sys.argv[2:]
        print("\n\n".join(stalls(path, label) for path, label in zip(pairs[::2], pairs[1::2], strict=True)))
