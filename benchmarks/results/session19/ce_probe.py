"""Nineteenth session: where the LM head + cross-entropy loses time at LLaMA-1B's vocabulary.

    python ce_probe.py --json out.json

At 16384 tokens, H 2048, V 128256 CODA's fwd+bwd took 50.8 ms against torch.compile's 41.3 and
a 36.6 ms floor (docs/benchmarks.md). Its blocks of 1024 rows each add their share of dw into a
float32 [V, H] accumulator: 16 read-modify-writes of 1.05 GB. This times (A) that accumulating
GEMM three ways at K = 1024, 2048, 4096: CODA's `output += input` program (its epilogue after
the K loop), cuBLAS with a float32 output of bf16 operands (`torch.addmm(..., out_dtype=)`,
beta = 1), and the bf16 GEMM with no accumulation; (B) the op's fwd+bwd with blocks of 2**27,
2**28 and 2**29 logits, each with CODA's and with cuBLAS's accumulation, time and peak memory.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
import triton.testing

import coda.ops.cross_entropy as ce
from coda import ops
from coda.ops import common

SIZES = {"gpt2": (16384, 768, 50257), "llama1b": (16384, 2048, 128256), "llama7b": (8192, 4096, 32000)}


def bench(fn) -> float:
    return triton.testing.do_bench(fn, warmup=3, rep=60, return_mode="median")


def cublas_weight_grad(dy, x, into=None, like=None):
    """common.weight_grad with a float32 `into` of bf16 operands accumulated by cuBLAS."""
    if into is not None and into.dtype != dy.dtype:
        return torch.addmm(into, dy.T, x, out_dtype=into.dtype, out=into)
    return common.weight_grad(dy, x, into=into, like=like)


def part_a(rows: list) -> None:
    v, h = 128256, 2048
    for k in (1024, 2048, 4096):
        g = torch.randn(k, v, device="cuda", dtype=torch.bfloat16) * 0.01
        a = torch.randn(k, h, device="cuda", dtype=torch.bfloat16)
        dw = torch.zeros(v, h, device="cuda", dtype=torch.float32)
        ref = (g.T.float() @ a.float())
        out = {}
        for label, fn in {"coda_accumulate": lambda: common.weight_grad(g, a, into=dw),
                          "cublas_out_dtype": lambda: cublas_weight_grad(g, a, into=dw),
                          "bf16_plain": lambda: torch.matmul(g.T, a)}.items():
            try:
                dw.zero_()
                fn()
                torch.cuda.synchronize()
                err = ((dw - ref).abs().max() / ref.abs().max()).item() if label != "bf16_plain" else None
                ms = bench(fn)
            except Exception as exc:   # no out_dtype overload in this PyTorch
                print(f"A k={k} {label}: {type(exc).__name__}: {exc}"[:300], flush=True)
                continue
            out[label] = ms
            rows.append(dict(part="A", k=k, impl=label, ms=ms, rel_err=err))
            print(f"A V={v} H={h} K={k} {label:18s} {ms * 1e3:8.1f} us  rel err {err}", flush=True)


def part_b(rows: list) -> None:
    for size, (t, h, v) in SIZES.items():
        torch.manual_seed(0)
        x = (torch.randn(t, h, device="cuda", dtype=torch.bfloat16)).requires_grad_()
        w = (torch.randn(v, h, device="cuda", dtype=torch.bfloat16) * 0.02).requires_grad_()
        target = torch.randint(v, (t,), device="cuda")

        def step(x=x, w=w, target=target):
            x.grad = w.grad = None
            ops.linear_cross_entropy(x, w, target).backward()
        base = None
        for logits_log2 in (27, 28, 29):
            for accumulate in ("coda", "cublas"):
                ce.BLOCK_LOGITS = 1 << logits_log2
                ce.weight_grad = common.weight_grad if accumulate == "coda" else cublas_weight_grad
                try:
                    step()
                    torch.cuda.synchronize()
                    grads = (x.grad.float(), w.grad.float())
                    if base is None:
                        base = grads
                    diff = max(((g - b).abs().max() / b.abs().max()).item()
                               for g, b in zip(grads, base, strict=True))
                    ms = bench(step)
                    torch.cuda.reset_peak_memory_stats()
                    before = torch.cuda.memory_allocated()
                    step()
                    torch.cuda.synchronize()
                    peak = (torch.cuda.max_memory_allocated() - before) / 2**30
                except Exception as exc:
                    print(f"B {size} 2**{logits_log2} {accumulate}: {type(exc).__name__}: {exc}"[:300],
                          flush=True)
                    continue
                rows.append(dict(part="B", size=size, block_logits_log2=logits_log2, accumulate=accumulate,
                                 ms=ms, peak_gib=peak, grad_diff_vs_first=diff))
                print(f"B {size:8s} blocks 2**{logits_log2} {accumulate:6s} {ms:8.2f} ms  "
                      f"peak {peak:5.2f} GiB"
                      f"  grads vs first {diff:.2e}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", required=True)
    args = parser.parse_args()
    rows: list = []
    part_a(rows)
    part_b(rows)
    Path(args.json).write_text(json.dumps(dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__,
                                               rows=rows), indent=1))


if __name__ == "__main__":
    main()
