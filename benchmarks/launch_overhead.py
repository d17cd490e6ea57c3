"""CPU cost of a cache-hit CODA launch, next to torch.matmul's, on a tiny GEMM.

    python benchmarks/launch_overhead.py

Both are called back to back many times without synchronizing, on a shape so small that the GPU
never limits: the time per call is the host-side cost of issuing the launch.
"""

import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
import coda


def per_call_us(fn, calls: int = 2000) -> float:
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - start) / calls * 1e6)
    return best


def main() -> None:
    a = torch.randn(128, 128, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(128, 128, device="cuda", dtype=torch.bfloat16)
    bias = torch.randn(128, device="cuda", dtype=torch.bfloat16)
    plain = coda.compile("output = input;")
    biased = coda.compile("EPILOGUE(bias: col) { output = gelu(input + bias); }")
    matmul = per_call_us(lambda: a @ w.T)
    results = {"torch.matmul": matmul,
               "coda plain": per_call_us(lambda: plain(a, w.T)),
               "coda bias+gelu": per_call_us(lambda: biased(a, w.T, bias=bias))}
    for name, us in results.items():
        print(f"{name:16s} {us:6.1f} us/call  (+{us - matmul:5.1f} us over torch.matmul)")


if __name__ == "__main__":
    main()
