"""Why a stream-K run spends ~40% more per K block than the data-parallel launch (forty-third
session, call 1): GPT-2's fc1 weight gradient (dyᵀ @ x, 3072 × 768 from K tokens) in the
heuristic's launch and in stream-K 128×256, at K = 16384 (dyᵀ and x: 126 MB, past the 50 MB L2)
and K = 4096 (31 MB, within it). If L2 reuse is what stream-K loses, its µs per K block at 4096
come close to the data-parallel launch's. µs a launch from CUDA graphs, medians of 5 rounds.
    python benchmarks/results/session43/stream_k_l2.py            # the timings
    python benchmarks/results/session43/stream_k_l2.py one LABEL  # 3 launches of one (for ncu)"""

import statistics
import sys
from pathlib import Path

import torch

root = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(root / "src"), str(root / "benchmarks")]
from kernel_configs import graph_us  # noqa: E402

from coda.codegen.tuning import Config  # noqa: E402
from coda.ops.common import PLAIN  # noqa: E402

STREAM_K = Config(128, 256, 64, 8, 3, split_epilogue=2, stream_k=True)


def runs(tokens: int) -> dict:
    """label -> (launch fn, K blocks of 64 a program runs)."""
    bf16 = dict(device="cuda", dtype=torch.bfloat16)
    dy, x = torch.randn(tokens, 3072, **bf16), torch.randn(tokens, 768, **bf16) / tokens**0.5
    launch = PLAIN.bind(dy.T, x)
    prog = launch.program.triton
    heuristic = prog.plan(launch, prog.config(launch, prog.kernel(launch)))
    stream_k = prog.plan(launch, STREAM_K)
    tiles, blocks = (3072 // 128) * (768 // 256), tokens // 64
    heuristic_tiles = (3072 // heuristic.config.block_m) * (768 // heuristic.config.block_n)
    per_program = blocks * max(1, -(-heuristic_tiles // 132))   # whole tiles a program runs
    return {f"K={tokens} heuristic": (lambda: heuristic.run(launch.a, launch.b, launch.values, None, 0),
                                      per_program),
            f"K={tokens} stream-K": (lambda: stream_k.run(launch.a, launch.b, launch.values, None, 0),
                                     tiles * blocks / 132),
            f"K={tokens} cuBLAS": (lambda: torch.matmul(dy.T, x), None)}


def main() -> None:
    if sys.argv[1:2] == ["one"]:
        fn = {**runs(16384), **runs(4096)}[sys.argv[2]][0]
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        return
    cases = {**runs(16384), **runs(4096)}
    rounds = {label: [] for label in cases}
    for _ in range(5):
        for label, (fn, _) in cases.items():
            rounds[label].append(graph_us(fn, 20))
    print("µs a launch from CUDA graphs (median of 5 rounds), and per K block a program runs")
    for label, (_, blocks) in cases.items():
        us = statistics.median(rounds[label])
        per = f"{us / blocks:7.3f} µs a block ({blocks:.1f} blocks)" if blocks else ""
        print(f"  {label:22s} {us:8.1f}   {per}", flush=True)


if __name__ == "__main__":
    main()
