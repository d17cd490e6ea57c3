"""(c) residual + row sum of squares and (e) dGELU + bias gradient in the ping-pong kernel with
their tile operand fetched by the loader warp in row chunks, a few KB at a time between the A/B
loads of the tile's own K loop, instead of the whole 32 KB tile at once by the MMA warpgroup
before its K loop. The question (docs/performance.md, sixtieth session): does a DRAM-bound
operand cost the K loop because its requests, all outstanding at once, hold up A's and B's?
Measured in the sixty-first session: no (docs/performance.md), so `Config.chunk_rows` was not
kept; apply `chunk_rows.patch` (beside this file) to run this probe again:

    git apply benchmarks/results/session61/chunk_rows.patch
    CODA_AUTOTUNE=0 python benchmarks/results/session61/chunk_probe.py            # GPU: check, time
    python benchmarks/results/session61/chunk_probe.py --offline                  # sm_90 compile only

Chunk c of CHUNK_ROWS rows (both column slices) is issued after the A/B loads of K block
STAGES + c (the MMA warpgroup is then inside this tile's K loop, so its buffers are free: it
says so on `tiles_free` before its K loop), or after the tile's last K block where K is short.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path[:0] = [str(ROOT / "src"), str(HERE.parent / "session57"), str(ROOT / "tests" / "codegen")]
import ablation_probe as ap  # noqa: E402

import coda  # noqa: E402
from coda.codegen import kernel as km  # noqa: E402
from coda.codegen.tuning import Config  # noqa: E402
from coda.ops.common import PLAIN  # noqa: E402

PROGRAMS = {"c": "EPILOGUE(residual: tile) { output = input + residual; ss = row_sum(output * output); }",
            "e": "EPILOGUE(pre: tile) { output = input * gelu_grad(pre); db = col_sum(output); }"}
OPERAND = {"c": "residual", "e": "pre"}
CONFIG = Config(128, 128, 64, 4, 4, split_epilogue=2, pingpong=True)


def config(rows: int = 0) -> Config:
    return dataclasses.replace(CONFIG, chunk_rows=rows)


def offline(rows_list: list[int]) -> None:
    import test_hopper_compiles as th
    km._num_sms = lambda device: 132
    m, n, k, bf16 = 16384, 3072, 768, torch.bfloat16
    for name, text in PROGRAMS.items():
        prog = coda.compile(text)
        launch = prog.bind(torch.empty(m, k, dtype=bf16), torch.empty(n, k, dtype=bf16).T, seed=1,
                           **{OPERAND[name]: torch.empty(m, n, dtype=bf16)})
        for rows in [0, *rows_list]:
            built = prog.triton._build(km._signature(launch, "pingpong", chunk_rows=rows), "pingpong")
            print(name, rows, json.dumps(th.compile_sm90(km, built, config(rows), launch)), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--offline", action="store_true")
    parser.add_argument("--rows", default="16,32,64")
    parser.add_argument("--shapes", default="16384x3072x768,16384x8192x2048")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json")
    args = parser.parse_args()
    rows_list = [int(r) for r in args.rows.split(",")]
    if args.offline:
        return offline(rows_list)
    torch.manual_seed(0)
    results = []
    for shape in args.shapes.split(","):
        m, n, k = (int(x) for x in shape.split("x"))
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16) / k**0.5
        plain = PLAIN.triton.plan(PLAIN.bind(a, b), CONFIG)
        run, same = {"plain": lambda p=plain: p.run(a, b, {}, None, 0)}, {}
        for name, text in PROGRAMS.items():
            prog = coda.compile(text)
            launch = prog.bind(a, b, seed=1, **{OPERAND[name]: torch.randn(m, n, device="cuda",
                                                                           dtype=torch.bfloat16)})
            plans = {name: prog.triton.plan(launch, config()),
                     **{f"{name}_chunk{rows}": prog.triton.plan(launch, config(rows)) for rows in rows_list}}
            if name == "c":
                plans["c_l2"] = ap.edited_plan(prog, launch, CONFIG, ap.EDITS["l2"])
            reference = prog.reference(a, b, seed=1, **{OPERAND[name]: launch.values[OPERAND[name]]})
            for label, plan in plans.items():
                if label != "c_l2":   # (the l2 edit computes wrong results: it is only timed)
                    got = plan.run(a, b, launch.values, None, 1)
                    same[label] = {out: round(float((got[out].float() - ref.float()).abs().max()
                                                    / ref.float().abs().max()), 5)
                                   for out, ref in reference.items()}
                run[label] = lambda p=plan, v=launch.values: p.run(a, b, v, None, 1)
        print(shape, "largest error over largest reference value:", same, flush=True)
        us, times = ap.timed_rounds(run, args.rounds, ap.event_us)
        ratios = {label: round(t / us["plain"], 3) for label, t in us.items()}
        print(json.dumps(dict(shape=shape, us=us, over_plain=ratios)), flush=True)
        results.append(dict(shape=shape, us=us, us_rounds=times, errors=same))
    if args.json:
        meta = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, command=" ".join(sys.argv))
        Path(args.json).write_text(json.dumps(dict(meta, rows=results), indent=1))


if __name__ == "__main__":
    main()
