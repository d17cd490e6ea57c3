"""Nineteenth session: dropout's keep bits drawn under the ping-pong kernel's K loop, against
drawn in the epilogue.

    python draw_probe.py --json out.json      # at commit 09ca67f: the drawing was reverted after it

At commit 09ca67f the ping-pong kernel's MMA warpgroup drew the Philox numbers of its next
epilogue between issuing a K block's MMA and waiting for the one before, four keep bits a
call (tl_math.keep_codes), where its issue slots are free; the epilogue only unpacked them.
Each dropout program is built both ways (the old way by switching `epilogue.drawn_ahead` off)
in 2 and 4 slices and timed back to back (gemm.py's paired_ratios): ahead over in-epilogue,
and each over the plain GEMM.
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
from coda.codegen import epilogue, tuning

AHEAD = epilogue.drawn_ahead
SHAPES = [(16384, 3072, 768), (16384, 8192, 2048), (16384, 768, 3072)]
PROGRAMS = {"b": CASES["bias_gelu_dropout_residual"]["coda"],
            "bias_gelu_dropout": "EPILOGUE(bias: col, p: scalar) "
                                 "{ output = dropout(gelu(input + bias), p); }"}


def plan_run(text: str, ahead: bool, a, b, values: dict, config):
    epilogue.drawn_ahead = AHEAD if ahead else (lambda program, sig: None)
    prog = coda.compile(text)
    launch = prog.bind(a, b, seed=1, **{p: v for p, v in values.items() if p in prog.ir.params})
    plan, out = prog.triton.start(launch, config)
    run = lambda: plan.run(launch.a, launch.b, launch.values, None, launch.seed)  # noqa: E731
    run()
    torch.cuda.synchronize()
    return run, out


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
        plain, _ = plan_run(CASES["plain"]["coda"], True, a, w.T, values,
                            tuning.Config(128, 128, 64, 4, 4, split_epilogue=2, pingpong=True))
        for split in (2, 4):
            config = tuning.Config(128, 128, 64, 4, 4, split_epilogue=split, pingpong=True)
            for name, text in PROGRAMS.items():
                inline, inline_out = plan_run(text, False, a, w.T, values, config)
                ahead, ahead_out = plan_run(text, True, a, w.T, values, config)
                same = all(torch.equal(inline_out[o], ahead_out[o]) for o in inline_out)
                gain = paired_ratios(ahead, inline, args.rounds)
                over_plain = paired_ratios(ahead, plain, args.rounds)
                inline_over_plain = paired_ratios(inline, plain, args.rounds)
                row = dict(shape=[m, n, k], split=split, program=name, same_outputs=same,
                           ahead_over_inline=statistics.median(gain),
                           ahead_over_plain=statistics.median(over_plain),
                           inline_over_plain=statistics.median(inline_over_plain),
                           ratios=dict(gain=gain, ahead=over_plain, inline=inline_over_plain))
                rows.append(row)
                print(f"{m}x{n}x{k} e{split} {name:18s} same {same}  ahead/inline "
                      f"{row['ahead_over_inline']:.3f}  ahead/plain {row['ahead_over_plain']:.3f}"
                      f"  inline/plain {row['inline_over_plain']:.3f}", flush=True)
    Path(args.json).write_text(json.dumps(dict(gpu=torch.cuda.get_device_name(), rows=rows), indent=1))


if __name__ == "__main__":
    main()
