"""GPT-2's two input-gradient GEMMs that cuBLAS runs inside CODA's backward (c_attn's dx,
16384x2304 @ 2304x768, and c_fc's, 16384x3072 @ 3072x768, the weight a transposed Conv1D view):
how many memsets each way of calling them issues, and their time replayed from a CUDA graph
(20 calls a replay, each after a small kernel, as in a step), against CODA's PLAIN GEMM.

    python benchmarks/results/session48/input_grad.py
"""

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "src"))
import torch

from coda.ops.common import PLAIN


def memsets(fn) -> int:
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sum(1 for e in prof.events() if "Memset" in e.name)


def replayed_us(fn, calls: int = 20, replays: int = 15) -> float:
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    probe = torch.empty(1024, device="cuda")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            probe.add_(1.0)   # a kernel before each GEMM, as in a step
            fn()
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / calls)
    return statistics.median(times)


def main() -> None:
    torch.manual_seed(0)
    for n in (2304, 3072):
        dy = torch.randn(16384, n, device="cuda", dtype=torch.bfloat16)
        conv = torch.randn(768, n, device="cuda", dtype=torch.bfloat16) * 0.02   # Conv1D [in, out]
        w = conv.T                                                               # [N, K] view
        wc = conv.T.contiguous()
        zero = torch.zeros(768, device="cuda", dtype=torch.bfloat16)
        ref = (dy.double() @ w.double())
        out = {}

        def lt():
            previous = torch.backends.cuda.preferred_blas_library()
            torch.backends.cuda.preferred_blas_library("cublaslt")
            try:
                return torch.matmul(dy, w)
            finally:
                torch.backends.cuda.preferred_blas_library(previous)

        ways = {"matmul": lambda: torch.matmul(dy, w),
                "matmul, w contiguous": lambda: torch.matmul(dy, wc),
                "cublaslt": lt,
                "addmm zero bias": lambda: torch.addmm(zero, dy, w),
                "coda PLAIN": lambda: PLAIN(dy, w)["output"]}
        for name, fn in ways.items():
            out[name] = fn()
            err = ((out[name].double() - ref).norm() / ref.norm()).item()
            print(f"N={n} {name:26} memsets {memsets(fn)}  {replayed_us(fn):7.1f} us  rel err {err:.2e}",
                  flush=True)


if __name__ == "__main__":
    main()
