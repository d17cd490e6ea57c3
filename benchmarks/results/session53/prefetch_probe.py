"""The Triton Hopper kernel with and without `Config.prefetch_tiles` (L2 prefetches of a tile's
epilogue operands as its K loop starts), on the fast-path epilogues that read a tile operand
(benchmarks/gemm.py) at the shapes where that kernel is the default (K >= 2048), and on LLaMA's
SwiGLU gradient and gated dx launches (benchmarks/kernel_configs.py). Each launch in its
heuristic configuration (A) and the same with prefetches (B), outputs compared bit for bit, then
timed from CUDA graphs in rounds of plain, A, B (reversed every other round); medians of the
per-round ratios.

    CODA_AUTOTUNE=0 python benchmarks/results/session53/prefetch_probe.py
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT / "src")]
import gemm  # noqa: E402
import kernel_configs  # noqa: E402
import torch  # noqa: E402

import coda  # noqa: E402
from coda.ops.common import PLAIN  # noqa: E402

CASES = ["residual", "residual_rowsumsq", "bias_gelu_dropout_residual", "dgelu", "dgelu_bias_grad"]
SHAPES = [(16384, 768, 3072), (8192, 11008, 4096), (8192, 4096, 11008), (16384, 8192, 2048),
          (4096, 4096, 4096), (8192, 8192, 8192)]


def launches():
    for m, n, k in SHAPES:
        a, w, ops = gemm.inputs(m, n, k)
        for case in CASES:
            prog = coda.compile(gemm.CASES[case]["coda"])
            yield f"{case} {m}x{n}x{k}", prog, prog.bind(a, w.T, seed=1, **gemm.used_operands(prog, ops))
    setup = kernel_configs.Setup(False)
    for name, (prog, a, b, operands, out) in kernel_configs.llama_launches(setup).items():
        if name in ("swiglu_grad", "gated_dx"):
            shape = f"{a.shape[0]}x{b.shape[1]}x{a.shape[1]}"
            yield f"llama {name} {shape}", prog, prog.bind(a, b, out=out, **operands)


def main() -> None:
    rows = []
    for label, prog, launch in launches():
        config = prog.triton.config(launch, prog.triton.kernel(launch))
        if config.pingpong:
            print(f"{label}: default is the ping-pong kernel, skipped", flush=True)
            continue
        a, b = launch.a, launch.b
        run = {}
        for name, c in (("A", config), ("B", dataclasses.replace(config, prefetch_tiles=True))):
            plan = prog.triton.plan(launch, c)
            run[name] = (lambda plan=plan: plan.run(a, b, launch.values, None, launch.seed))
        got = {name: {k: v.clone() for k, v in fn().items()} for name, fn in run.items()}
        same = all(torch.equal(got["A"][k], got["B"][k]) for k in got["A"])
        bare = PLAIN.bind(a, b)
        plain_plan = PLAIN.triton.plan(bare, PLAIN.triton.config(bare, PLAIN.triton.kernel(bare)))
        run["plain"] = lambda: plain_plan.run(a, b, {}, None, 0)
        times = {name: [] for name in run}
        for r in range(6):
            for name in (["plain", "A", "B"] if r % 2 == 0 else ["B", "A", "plain"]):
                times[name].append(kernel_configs.graph_us(run[name], 10))
        ratio = {key: statistics.median(x / y for x, y in zip(times[p], times[q], strict=True))
                 for key, (p, q) in {"A/plain": ("A", "plain"), "B/plain": ("B", "plain"),
                                     "B/A": ("B", "A")}.items()}
        row = dict(case=label, config=str(config), same=same, ratios=ratio,
                   us={k: statistics.median(v) for k, v in times.items()})
        rows.append(row)
        print(f"{label:45s} same={same} plain {row['us']['plain']:7.1f}  A {row['us']['A']:7.1f}  "
              f"B {row['us']['B']:7.1f} us   A/plain {ratio['A/plain']:.3f}  B/plain {ratio['B/plain']:.3f}  "
              f"B/A {ratio['B/A']:.3f}", flush=True)
    out = Path(os.environ.get("OUT", "/tmp")) / "prefetch_probe.json"
    out.write_text(json.dumps(dict(gpu=torch.cuda.get_device_name(), rows=rows), indent=1))


if __name__ == "__main__":
    main()
