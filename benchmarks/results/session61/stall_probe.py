"""One ping-pong launch to profile: the plain GEMM, (c) residual + row sum of squares, or (c) with
one of session57/ablation_probe.py's edits (`l2`: every tile fetches the first tile's residual,
bytes that L2 holds; `nofetch`: none fetched; `twice`: each residual fetched twice), at
16384x3072x768, 4-deep ring, 2 slices. Run under Nsight Compute with --launch-skip 1
--launch-count 1 (the first launch compiles and warms).

    CODA_AUTOTUNE=0 python benchmarks/results/session61/stall_probe.py --variant l2
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "session57"))
import ablation_probe as ap

from coda.codegen.tuning import Config
from coda.ops.common import PLAIN


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variant", choices=["plain", "c", "l2", "twice", "nofetch"], required=True)
    parser.add_argument("--launches", type=int, default=3)
    parser.add_argument("--stages", type=int, default=4, help="the depth of the A/B ring")
    args = parser.parse_args()
    m, n, k = 16384, 3072, 768
    torch.manual_seed(0)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16) / k**0.5
    config = Config(128, 128, 64, 4, args.stages, split_epilogue=2, pingpong=True)
    if args.variant == "plain":
        plan, values, seed = PLAIN.triton.plan(PLAIN.bind(a, b), config), {}, 0
    else:
        prog, ops = ap.programs(m, n)["residual_rowsumsq"]
        launch = prog.bind(a, b, seed=1, **ops)
        edits = [] if args.variant == "c" else ap.EDITS[args.variant]
        plan = ap.edited_plan(prog, launch, config, edits) if edits else prog.triton.plan(launch, config)
        values, seed = launch.values, 1
    for _ in range(args.launches):
        plan.run(a, b, values, None, seed)
    torch.cuda.synchronize()
    print(f"{args.variant}: {args.launches} launches", flush=True)


if __name__ == "__main__":
    main()
