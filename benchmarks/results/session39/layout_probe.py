"""GPT-2's layer GEMMs with B laid out as HF's Conv1D weight ([K, N], N contiguous: what the peer's
step and CODA's patched GPT-2 multiply by) and as an nn.Linear weight ([N, K], used as W.T: what
benchmarks/gemm.py times): cuBLAS (mm, addmm with the bias) against CODA's plain GEMM and its
bias + GELU, each timed alone (do_bench, medians) and replayed back to back from a CUDA graph of
20 launches (sustained, at the power cap). Run: python benchmarks/results/session39/layout_probe.py"""

import json
import os
import sys
from pathlib import Path

import torch
import triton.testing

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "src"))
import coda

SHAPES = {"fc1 16384x3072x768": (16384, 3072, 768), "fc2 16384x768x3072": (16384, 768, 3072),
          "c_attn 16384x2304x768": (16384, 2304, 768), "c_proj 16384x768x768": (16384, 768, 768)}


def sustained(fn, launches: int = 20, replays: int = 30) -> float:
    """µs a launch, `launches` captured back to back and the graph replayed `replays` times."""
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(launches):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / (launches * replays)


def main() -> None:
    plain = coda.compile("output = input;")
    gelu = coda.compile("EPILOGUE(bias: col) { output = gelu(input + bias); }")
    rows = []
    for name, (m, n, k) in SHAPES.items():
        torch.manual_seed(0)
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        conv = torch.randn(k, n, device="cuda", dtype=torch.bfloat16) / k**0.5   # Conv1D [K, N]
        linear = conv.T.contiguous()                                               # nn.Linear [N, K]
        bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        for layout, b in (("conv1d [K,N]", conv), ("linear [N,K].T", linear.T)):
            runs = {"cublas mm": lambda b=b: x @ b,
                    "cublas addmm": lambda b=b: torch.addmm(bias, x, b),
                    "coda plain": lambda b=b: plain(x, b),
                    "coda bias+gelu": lambda b=b: gelu(x, b, bias=bias)}
            for impl, fn in runs.items():
                alone = triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median") * 1e3
                row = dict(shape=name, layout=layout, impl=impl, alone_us=alone, sustained_us=sustained(fn))
                rows.append(row)
                print(f"{name:24s} {layout:15s} {impl:15s} alone {alone:7.1f} us  sustained "
                      f"{row['sustained_us']:7.1f} us", flush=True)
    out = Path(os.environ.get("OUT", "/tmp")) / "layout_probe.json"
    out.write_text(json.dumps(dict(gpu=torch.cuda.get_device_name(), rows=rows), indent=1))


if __name__ == "__main__":
    main()
