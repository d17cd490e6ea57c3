"""Does the order of the tiles change what (c) residual + row sum of squares costs at K = 768?
GROUP_M (how many row blocks the persistent ping-pong kernel walks down before moving to the
next column block) decides which SMs read the same A and B tiles at the same time, and so how
the L2's reads of them spread over its slices. Plain and (c) at each GROUP_M, CUDA events,
rounds in alternating order.

    CODA_AUTOTUNE=0 python benchmarks/results/session61/group_probe.py --json out.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "session57"))
import ablation_probe as ap

import coda
from coda.codegen.tuning import Config
from coda.ops.common import PLAIN

PROGRAM = "EPILOGUE(residual: tile) { output = input + residual; ss = row_sum(output * output); }"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", default="1,4,8,16,32")
    parser.add_argument("--shape", default="16384x3072x768")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--json")
    args = parser.parse_args()
    m, n, k = (int(x) for x in args.shape.split("x"))
    torch.manual_seed(0)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16) / k**0.5
    prog = coda.compile(PROGRAM)
    launch = prog.bind(a, b, seed=1, residual=torch.randn(m, n, device="cuda", dtype=torch.bfloat16))
    run = {}
    for group in (int(g) for g in args.groups.split(",")):
        config = Config(128, 128, 64, 4, 4, group_m=group, split_epilogue=2, pingpong=True)
        plain, fused = PLAIN.triton.plan(PLAIN.bind(a, b), config), prog.triton.plan(launch, config)
        run[f"plain_g{group}"] = lambda p=plain: p.run(a, b, {}, None, 0)
        run[f"c_g{group}"] = lambda p=fused: p.run(a, b, launch.values, None, 1)
    us, times = ap.timed_rounds(run, args.rounds, ap.event_us)
    print(json.dumps(us), flush=True)
    if args.json:
        meta = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, command=" ".join(sys.argv))
        Path(args.json).write_text(json.dumps(dict(meta, shape=args.shape, us=us, us_rounds=times), indent=1))


if __name__ == "__main__":
    main()
