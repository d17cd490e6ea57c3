"""Nineteenth session: the ping-pong epilogue as a loop over its column slices, against unrolled.

    python loop_probe.py --json out.json

The ping-pong kernel used to call the epilogue once per column slice in a static loop: its code
in EPILOGUE_SPLIT copies per MMA warpgroup (6,752 SASS instructions for (b), more than the
instruction cache keeps close: Nsight Compute put 30% of (b)'s epilogue stalls on instruction
fetch). As a run-time loop (made here from the template) the code is one copy; each slice
is then picked from the tile by selects. Each fast-path program is built with both templates,
in 2 and 4 slices, and timed back to back (gemm.py's paired_ratios): looped over unrolled, and
looped over the plain GEMM.
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
from coda.codegen import mainloops, tuning

UNROLLED = mainloops.MAINLOOPS["pingpong"]
PICK = """

@gluon.jit
def pick(slices, j):
    tile = slices[0]
    for i in gl.static_range(1, len(slices)):
        tile = gl.where(j == i, slices[i], tile)
    return tile
"""
LOOPED = UNROLLED.replace("for j in gl.static_range(EPILOGUE_SPLIT):\n            epilogue(slices[j],",
                          "for j in range(EPILOGUE_SPLIT):\n            epilogue(pick(slices, j),") + PICK
assert "pick(slices, j)" in LOOPED
SHAPES = [(16384, 3072, 768), (16384, 8192, 2048), (16384, 768, 3072)]
PROGRAMS = ["bias_gelu", "bias_gelu_dropout_residual", "residual_rowsumsq", "rowscale_swiglu",
            "dgelu_bias_grad"]


def plan_run(text: str, template: str, a, b, values: dict, config):
    mainloops.MAINLOOPS["pingpong"] = template
    prog = coda.compile(text)
    launch = prog.bind(a, b, seed=1, **{p: v for p, v in values.items() if p in prog.ir.params})
    plan, _ = prog.triton.start(launch, config)
    run = lambda: plan.run(launch.a, launch.b, launch.values, None, launch.seed)  # noqa: E731
    run()
    torch.cuda.synchronize()
    return run


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", required=True)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    rows = []
    for m, n, k in SHAPES:
        torch.manual_seed(0)
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k**0.5
        values = operands(m, n)
        plain = plan_run(CASES["plain"]["coda"], UNROLLED, a, w.T, values,
                         tuning.Config(128, 128, 64, 4, 4, split_epilogue=2, pingpong=True))
        for split in (2, 4):
            config = tuning.Config(128, 128, 64, 4, 4, split_epilogue=split, pingpong=True)
            for name in PROGRAMS:
                text = CASES[name]["coda"]
                try:
                    unrolled = plan_run(text, UNROLLED, a, w.T, values, config)
                    looped = plan_run(text, LOOPED, a, w.T, values, config)
                except Exception as err:  # shared memory at 4 slices, say
                    print(f"{m}x{n}x{k} e{split} {name}: {type(err).__name__}", flush=True)
                    continue
                gain = paired_ratios(looped, unrolled, args.rounds)
                over_plain = paired_ratios(looped, plain, args.rounds)
                unrolled_over_plain = paired_ratios(unrolled, plain, args.rounds)
                row = dict(shape=[m, n, k], split=split, program=name,
                           looped_over_unrolled=statistics.median(gain),
                           looped_over_plain=statistics.median(over_plain),
                           unrolled_over_plain=statistics.median(unrolled_over_plain),
                           ratios=dict(gain=gain, looped=over_plain, unrolled=unrolled_over_plain))
                rows.append(row)
                print(f"{m}x{n}x{k} e{split} {name:28s} looped/unrolled {row['looped_over_unrolled']:.3f}"
                      f"  looped/plain {row['looped_over_plain']:.3f}"
                      f"  unrolled/plain {row['unrolled_over_plain']:.3f}", flush=True)
    Path(args.json).write_text(json.dumps(dict(gpu=torch.cuda.get_device_name(), rows=rows), indent=1))


if __name__ == "__main__":
    main()
