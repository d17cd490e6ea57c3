"""The SwiGLU gradient (two tile operands, a packed [M, 2N] output) in the ping-pong kernel with
its output staged in the operands' buffers, against the Triton kernel the heuristic gives it.

    CODA_AUTOTUNE=0 python benchmarks/results/session56/pack_staging_probe.py [--json out.json]

At the dh GEMM shapes of the SwiGLU MLPs of the micro suite and of LLaMA-492M training (M x F x
hidden): each launch captured ten times in a CUDA graph (kernel_configs.graph_us), five rounds
in turn, medians; CODA's plain GEMM and cuBLAS's of the same A and B beside it. Every
configuration's outputs are checked against the heuristic's (kernel_configs.agrees).
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
import kernel_configs as kc  # noqa: E402

from coda.codegen.tuning import Config  # noqa: E402
from coda.ops import gated_mlp  # noqa: E402
from coda.ops.common import PLAIN  # noqa: E402

SHAPES = {"gpt2": (16384, 3072, 768), "llama492m": (16384, 5632, 2048),
          "llama1b": (16384, 8192, 2048), "llama7b": (8192, 11008, 4096)}
#: ping-pong configurations: ring depth s, epilogue slices e; x: one set of operand buffers
#: shared by the two warpgroups (Config.share_tiles), which leaves room for a deeper ring
#: (call 3 ran an earlier share_tiles, its fetch in the K loop: share_tiles.patch)
CONFIGS = {f"pingpong_s{s}e{e}{'x' * x}": Config(128, 128, 64, 4, s, split_epilogue=e, pingpong=True,
                                                  share_tiles=x)
           for s, e, x in ((3, 2, False), (3, 4, False), (4, 2, True), (4, 4, True), (5, 2, True),
                           (5, 4, True))}


def case(m: int, f: int, h: int, rounds: int) -> dict:
    prog = gated_mlp.grad_program("silu", "sumsq", True)
    bf16 = dict(device="cuda", dtype=torch.bfloat16)
    dy, w_down = torch.randn(m, h, **bf16), torch.randn(h, f, **bf16) / f**0.5
    ops = dict(g=torch.randn(m, f, **bf16), u=torch.randn(m, f, **bf16),
               ss=torch.rand(m, device="cuda") * h + 1, inv_n=1.0 / h, eps=1e-5)
    launch = prog.bind(dy, w_down, **ops)
    plans = {"heuristic": prog.triton.start(launch)[0]}   # the heuristic's, or the first that fits
    heuristic = plans["heuristic"].config
    plans |= {label: prog.triton.plan(launch, config) for label, config in CONFIGS.items()}
    run = {label: (lambda p=plan: p.run(dy, w_down, launch.values, None, 0)) for label, plan in plans.items()}
    first = {k: v.clone() for k, v in run["heuristic"]().items()}
    agree = {label: kc.agrees({k: v.clone() for k, v in fn().items()}, first) for label, fn in run.items()}
    plain = PLAIN.bind(dy, w_down)
    for label, plan in (("plain_heuristic", PLAIN.triton.start(plain)[0]),
                        *((f"plain_pingpong_s{s}e2", PLAIN.triton.plan(plain, Config(
                            128, 128, 64, 4, s, split_epilogue=2, pingpong=True))) for s in (3, 4, 5))):
        run[label] = lambda p=plan: p.run(dy, w_down, {}, None, 0)
    run["cublas"] = lambda: torch.matmul(dy, w_down)
    times = {label: [] for label in run}
    for r in range(rounds):
        for label in (run if r % 2 == 0 else reversed(list(run))):
            times[label].append(kc.graph_us(run[label], 10))
    result = dict(m=m, f=f, h=h, heuristic=str(heuristic), agrees=agree,
                  us={label: round(statistics.median(t), 1) for label, t in times.items()},
                  us_rounds={label: [round(x, 1) for x in t] for label, t in times.items()})
    print(json.dumps({k: result[k] for k in ("m", "f", "h", "agrees", "us")}), flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--shapes", default=",".join(SHAPES))
    args = parser.parse_args()
    torch.manual_seed(0)
    rows = {name: case(*SHAPES[name], args.rounds) for name in args.shapes.split(",")}
    if args.json:
        meta = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, command=" ".join(sys.argv))
        Path(args.json).write_text(json.dumps(meta | dict(rows=rows), indent=1))


if __name__ == "__main__":
    main()
