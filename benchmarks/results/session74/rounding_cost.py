"""What summing a producer's output as stored costs: the residual epilogue with its norm's row
sums of the float32 values (before this session) against the same sums of the values rounded to
bf16 (`coda.ops.common.as_stored`), and the plain GEMM, at the GEMMs that carry them in GPT-2
(attention out 16384x768x768, fc2 16384x768x3072) and LLaMA (down 16384x2048x8192, 8192x4096x11008).
One process, the three kernels' timings interleaved over rounds (each round a rotated order);
medians of triton.testing.do_bench medians. Writes JSON to the path given."""

import json
import statistics
import sys

import torch
import triton

import coda

SUMS = {"layer": "ss = row_sum(output * output); s = row_sum(output);",
        "rms": "ss = row_sum(output * output);"}
SHAPES = [("gpt2 attn out", 16384, 768, 768, "layer"), ("gpt2 fc2", 16384, 768, 3072, "layer"),
          ("llama1b down", 16384, 2048, 8192, "rms"), ("llama7b down", 8192, 4096, 11008, "rms")]


def program(kind: str, sums: str):
    y = "input + residual" if kind == "unrounded" else "round_bf16(input + residual)"
    return coda.compile(f"EPILOGUE {kind}(residual: tile) {{ output = {y}; {SUMS[sums]} }}")


rows = []
for name, m, n, k, sums in SHAPES:
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16).T / k**0.5
    r = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    outs = ["output", *(["ss", "s"] if sums == "layer" else ["ss"])]
    progs = {kind: program(kind, sums) for kind in ("unrounded", "rounded")}
    runs = {"plain": lambda: torch.matmul(a, b)}
    for kind, prog in progs.items():
        runs[kind] = (lambda prog=prog: prog(a, b, residual=r, outputs=outs))
    got, ref = (progs[kind](a, b, residual=r, outputs=outs) for kind in ("rounded", "unrounded"))
    y = got["output"].float()
    stored_ss = (y * y).sum(-1)
    check = {"rounded ss vs stored y": ((got["ss"] - stored_ss).abs().max() / stored_ss.max()).item(),
             "unrounded ss vs stored y": ((ref["ss"] - stored_ss).abs().max() / stored_ss.max()).item(),
             "outputs equal": bool(torch.equal(got["output"], ref["output"]))}
    times = {key: [] for key in runs}
    keys = list(runs)
    for round_ in range(9):
        for key in keys[round_ % 3:] + keys[:round_ % 3]:
            ms = triton.testing.do_bench(runs[key], warmup=25, rep=100, return_mode="median")
            times[key].append(ms * 1e3)
    med = {key: statistics.median(v) for key, v in times.items()}
    row = dict(shape=name, m=m, n=n, k=k, sums=sums, us=med, check=check,
               rounded_over_unrounded=med["rounded"] / med["unrounded"],
               unrounded_over_cublas=med["unrounded"] / med["plain"],
               rounded_over_cublas=med["rounded"] / med["plain"])
    rows.append(row)
    print(f"{name:14s} cuBLAS {med['plain']:7.1f} us  unrounded {med['unrounded']:7.1f}  "
          f"rounded {med['rounded']:7.1f}  rounded/unrounded {row['rounded_over_unrounded']:.4f}  {check}",
          flush=True)
json.dump(dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
               rows=rows), open(sys.argv[1], "w"), indent=1)
