"""Nineteenth session: the ping-pong kernel's tile order (GROUP_M) and ring depth, per epilogue.

    python order_probe.py --json out.json

A tile operand costs the ping-pong kernel more than its instructions (the residual alone 1.13x
the plain GEMM at 16384x3072x768): the seventeenth session's Nsight Compute reports put it on
L2 (hit rate 91% -> 78%). GROUP_M sets how many row blocks the persistent programs walk
together (how much of A and B the SMs share in L2 at a time), the ring depth how far the
loader runs ahead. Each variant is timed back to back with the default configuration (128x128,
4-deep ring, 2 slices, GROUP_M 8) on the same program (gemm.py's paired_ratios).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from gemm import CASES, operands, paired_ratios

import coda
from coda.codegen.tuning import Config

SHAPES = [(16384, 3072, 768), (16384, 8192, 2048)]
PROGRAMS = ["plain", "residual", "bias_gelu", "bias_gelu_dropout_residual", "residual_rowsumsq",
            "dgelu_bias_grad"]
DEFAULT = Config(128, 128, 64, 4, 4, split_epilogue=2, pingpong=True)
VARIANTS = {"g4": Config(128, 128, 64, 4, 4, group_m=4, split_epilogue=2, pingpong=True),
            "g16": Config(128, 128, 64, 4, 4, group_m=16, split_epilogue=2, pingpong=True),
            "g32": Config(128, 128, 64, 4, 4, group_m=32, split_epilogue=2, pingpong=True),
            "s5": Config(128, 128, 64, 4, 5, split_epilogue=2, pingpong=True)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rows = []
    programs = {name: coda.compile(CASES[name]["coda"]) for name in PROGRAMS}
    for m, n, k in SHAPES:
        torch.manual_seed(0)
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k**0.5
        values = operands(m, n)
        for name, prog in programs.items():
            launch = prog.bind(a, w.T, seed=1, **{p: v for p, v in values.items() if p in prog.ir.params})

            def run_of(config, launch=launch, prog=prog):
                plan, _ = prog.triton.start(launch, config)
                return lambda: plan.run(launch.a, launch.b, launch.values, None, launch.seed)
            base = run_of(DEFAULT)
            line = f"{m}x{n}x{k} {name:28s}"
            for label, config in VARIANTS.items():
                try:
                    run = run_of(config)
                except Exception as err:  # shared memory of the deeper ring
                    line += f"  {label} {type(err).__name__}"
                    continue
                ratios = paired_ratios(run, base, args.rounds)
                rows.append(dict(shape=[m, n, k], program=name, variant=label,
                                 over_default=statistics.median(ratios), ratios=ratios))
                line += f"  {label} {statistics.median(ratios):.3f}"
            print(line, flush=True)
    Path(args.json).write_text(json.dumps(dict(gpu=torch.cuda.get_device_name(), rows=rows), indent=1))


if __name__ == "__main__":
    main()
