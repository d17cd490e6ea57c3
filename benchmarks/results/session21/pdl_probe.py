"""Twenty-first session: what does programmatic dependent launch (PDL) save between kernels?

    python pdl_probe.py [--json out.json]        (H200)

A CODA training step replays ~700 kernels from one CUDA graph; the profiler's GPU time is
0.6-1.2 ms short of the step's wall time (BERT, GPT-2), about a microsecond a kernel. With PDL
(`launch_pdl=True`, `griddepcontrol.wait` before a kernel touches memory) a kernel is launched
while the one before it drains, so the gap can close. This times chains of Triton kernels
captured in a CUDA graph with and without PDL: a one-block kernel (the gap alone), a map over
[16384, 768] bf16 (a CODA map's size), and the map between cuBLAS GEMMs (a training step's mix).
Each chain's result is checked (every kernel adds one).
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait


@triton.jit
def add_one(x_ptr, y_ptr, n, BLOCK: tl.constexpr, PDL: tl.constexpr, EARLY: tl.constexpr):
    if PDL:
        gdc_wait()            # the previous kernel's writes are visible past this point
        if EARLY:
            gdc_launch_dependents()
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(y_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + 1, mask=mask)


def launch(x: torch.Tensor, y: torch.Tensor, variant: str) -> None:
    n, block = x.numel(), 1024 if x.numel() <= 1024 else 4096
    pdl = variant != "plain"
    add_one[(triton.cdiv(n, block),)](x, y, n, BLOCK=block, PDL=pdl, EARLY=variant == "pdl_early",
                                      num_warps=4, launch_pdl=pdl)


def chain(kind: str, variant: str, length: int):
    """(graph, output, expected) of `length` kernels of `kind` alternating two buffers."""
    numel = 768 if kind == "tiny" else 16384 * 768
    a = torch.zeros(numel, device="cuda", dtype=torch.bfloat16 if kind != "tiny" else torch.float32)
    b = torch.empty_like(a)
    gemm_a = torch.randn(16384, 768, device="cuda", dtype=torch.bfloat16)
    gemm_b = torch.randn(768, 768, device="cuda", dtype=torch.bfloat16)
    gemm_out = torch.empty(16384, 768, device="cuda", dtype=torch.bfloat16)

    def body():
        src, dst = a, b
        for i in range(length):
            if kind == "mixed" and i % 2 == 0:
                torch.mm(gemm_a, gemm_b, out=gemm_out)
            launch(src, dst, variant)
            src, dst = dst, src
        return src

    body()   # compile
    torch.cuda.synchronize()
    a.zero_()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        out = body()
    torch.cuda.current_stream().wait_stream(stream)
    return graph, out, a, float(length)


def time_graph(graph, repeats: int = 30) -> float:
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json")
    args = parser.parse_args()
    rows = []
    for kind, length in (("tiny", 200), ("map", 100), ("mixed", 100)):
        for variant in ("plain", "pdl", "pdl_early"):
            graph, out, start, expected = chain(kind, variant, length)
            start.zero_()
            graph.replay()
            torch.cuda.synchronize()
            right = bool((out.float() == expected).all())
            us = time_graph(graph)
            rows.append(dict(kind=kind, variant=variant, kernels=length, us=us, per_kernel_us=us / length,
                             correct=right))
            print(f"{kind:6s} {variant:10s} {length:4d} kernels {us:9.1f} us  {us / length:7.2f} us/kernel  "
                  f"correct={right}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__,
                           triton=triton.__version__, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
