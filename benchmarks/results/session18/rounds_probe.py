"""Eighteenth session: what dropout's Philox rounds cost in the ping-pong kernel (a timing probe:
the masks of fewer rounds are not CODA's stream; nothing here is kept).

    python rounds_probe.py ROUNDS    # one process per count: the kernels read it when they compile

Times (b) bias + GELU + dropout + residual at 16384x3072x768 in CODA's pick, back to back with
the plain GEMM (gemm.py's paired_ratios), with tl_math's Philox run for ROUNDS rounds.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import torch
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from gemm import P, paired_ratios

import coda
from coda.codegen import tl_math

tl_math.ROUNDS = tl.constexpr(int(sys.argv[1]))
m, n, k = 16384, 3072, 768
torch.manual_seed(0)
a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k**0.5
values = dict(bias=torch.randn(n, device="cuda", dtype=torch.bfloat16),
              residual=torch.randn(m, n, device="cuda", dtype=torch.bfloat16), p=P)
runs = {}
for name, text in {"plain": "output = input;",
                   "b": "EPILOGUE(bias: col, residual: tile, p: scalar) "
                        "{ output = dropout(gelu(input + bias), p) + residual; }"}.items():
    prog = coda.compile(text)
    launch = prog.bind(a, w.T, seed=1, **{p: v for p, v in values.items() if p in prog.ir.params})
    plan, out = prog.triton.start(launch)
    runs[name] = (lambda plan=plan, launch=launch:
                  plan.run(launch.a, launch.b, launch.values, None, launch.seed))
    if name == "b":
        kept = (out["output"].float() != values["residual"].float()).float().mean().item()
ratios = paired_ratios(runs["b"], runs["plain"], 7)
print(f"rounds {sys.argv[1]}: (b) over plain {statistics.median(ratios):.3f} "
      f"({min(ratios):.3f}-{max(ratios):.3f}), kept fraction {kept:.4f}", flush=True)
