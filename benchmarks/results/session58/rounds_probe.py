"""What dropout's Philox rounds cost in issue 8's case (b), bias + GELU + dropout + residual.

    CODA_AUTOTUNE=0 python benchmarks/results/session58/rounds_probe.py --philox-rounds 7 --json out.json

The kernels are built with `tl_math.ROUNDS` set to `--philox-rounds` (10 is CODA's RNG; other
values change the random stream and exist here only to be timed). Each program runs in the
ping-pong kernel (the heuristic's configuration at K <= 1024) and in the Triton persistent kernel;
the faster of the two is paired with the faster plain GEMM (gemm.paired_ratios: each round times
plain, fused, fused, plain, reversed in odd rounds). Run once a process per rounds value, each with
its own TRITON_CACHE_DIR: the generated source does not change with the rounds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "benchmarks")]
import gemm  # noqa: E402
import triton.language as tl  # noqa: E402

import coda  # noqa: E402
from coda.codegen import tl_math  # noqa: E402

SHAPES = [(16384, 3072, 768), (16384, 8192, 2048)]
CASES = ["plain", "bias_gelu", "bias_gelu_dropout_residual"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--philox-rounds", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--json")
    args = parser.parse_args()
    tl_math.ROUNDS = tl.constexpr(args.philox_rounds)   # before any kernel is built
    rows = []
    for m, n, k in SHAPES:
        a, w, ops = gemm.inputs(m, n, k)
        fastest, us = {}, {}
        for case in CASES:
            prog = coda.compile(gemm.CASES[case]["coda"])
            runs = gemm.mainloop_runs(prog, a, w.T, gemm.used_operands(prog, ops))
            runs = {label: run for label, run in runs.items()
                    if label in ("coda_hopper", "coda_pingpong/128x128x64s4e2")}
            times = {label: gemm.bench(run) * 1e3 for label, run in runs.items()}
            best = min(times, key=times.get)
            fastest[case], us[case] = runs[best], {label: round(t, 1) for label, t in times.items()}
            print(f"{m}x{n}x{k} R={args.philox_rounds} {case}: {us[case]}", flush=True)
        for case in CASES[1:]:
            ratios = gemm.paired_ratios(fastest[case], fastest["plain"], args.rounds)
            ratio = statistics.median(ratios)
            print(f"{m}x{n}x{k} R={args.philox_rounds} {case} over plain: {ratio:.3f} "
                  f"{[round(r, 3) for r in ratios]}", flush=True)
            rows.append(dict(shape=[m, n, k], case=case, philox_rounds=args.philox_rounds,
                             us=us[case], plain_us=us["plain"], ratio=ratio, ratios=ratios))
    if args.json:
        meta = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, command=" ".join(sys.argv))
        Path(args.json).write_text(json.dumps(dict(meta, rows=rows), indent=1))


if __name__ == "__main__":
    main()
