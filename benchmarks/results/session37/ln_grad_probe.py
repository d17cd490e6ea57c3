"""Thirty-seventh session: LayerNorm's backward in one pass (`coda.nn.layer_norm_grad`) against
the two map programs `coda.nn.layer_norm` runs now (LN_GRAD_SUMS, then LN_GRAD_DX, plus their
finishing kernels), µs from CUDA graphs, medians of two passes, in tile variants (rows a step,
warps, programs per SM, pipeline stages). Every variant's dx, dg and dβ are checked against
float64 autograd first (relative error ≤ 2× the maps' own + 1e-3 of bf16 slack).

    PYTHONPATH=$PWD/src CODA_AUTOTUNE=0 python benchmarks/results/session37/ln_grad_probe.py [--json F]

On a CPU with TRITON_INTERPRET=1 it checks a few variants at small shapes in float32, untimed.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics

import torch
import triton

from coda.nn import layer_norm_grad
from coda.nn.layer_norm import LN_GRAD_DX, LN_GRAD_SUMS

CUDA = torch.cuda.is_available()
DEVICE, DTYPE = ("cuda", torch.bfloat16) if CUDA else ("cpu", torch.float32)


def inputs(m: int, n: int, seed: int = 0) -> dict:
    gen = torch.Generator().manual_seed(seed)
    x = (torch.randn(m, n, generator=gen) * 2 + 0.5).to(DEVICE, DTYPE)
    dy = torch.randn(m, n, generator=gen).to(DEVICE, DTYPE)
    dres = torch.randn(m, n, generator=gen).to(DEVICE, DTYPE)
    g = (1 + 0.3 * torch.randn(n, generator=gen)).to(DEVICE, DTYPE)
    shift = x[:, 0]
    d = x.float() - shift.float()[:, None]
    return dict(x=x, dy=dy, dres=dres, g=g, shift=shift, s=d.sum(1), ss=(d * d).sum(1), inv_n=1.0 / n,
                eps=1e-5)


def reference(t: dict) -> tuple[torch.Tensor, ...]:
    x = t["x"].double().requires_grad_()
    g = t["g"].double().requires_grad_()
    beta = torch.zeros_like(g, requires_grad=True)
    y = torch.nn.functional.layer_norm(x, (x.shape[1],), g, beta, t["eps"])
    y.backward(t["dy"].double())
    return x.grad + t["dres"].double(), g.grad, beta.grad


def two_maps(t: dict) -> tuple[torch.Tensor, ...]:
    row = {k: t[k] for k in ("shift", "s", "ss", "inv_n", "eps")}
    sums = LN_GRAD_SUMS.map(t["dy"], **row, g=t["g"], xin=t["x"], outputs=["a", "b", "dg", "dbeta"],
                            dtypes={"dg": t["g"].dtype, "dbeta": t["g"].dtype})
    dx = LN_GRAD_DX[True].map(t["dy"], **row, g=t["g"], xin=t["x"], a=sums["a"], b=sums["b"],
                              dres=t["dres"])["output"]
    return dx, sums["dg"], sums["dbeta"]


def one_pass(t: dict, choice) -> tuple[torch.Tensor, ...]:
    return layer_norm_grad.launch(t["dy"], t["x"], t["g"], t["shift"], t["s"], t["ss"], t["inv_n"],
                                  t["eps"], t["dres"], True, (t["g"].dtype, t["g"].dtype), choice)


def errors(got, want) -> list[float]:
    return [((a.double() - b).norm() / b.norm()).item() for a, b in zip(got, want, strict=True)]


def time_us(fn) -> float:
    import triton.testing

    fn()
    return statistics.median(1e3 * triton.testing.do_bench_cudagraph(fn, rep=40, return_mode="median")
                             for _ in range(2))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json")
    args = parser.parse_args()
    sms = torch.cuda.get_device_properties(0).multi_processor_count if CUDA else 2
    shapes = [(16384, 768), (16384, 1024), (8192, 2048), (8192, 4096)] if CUDA else [(70, 48), (33, 200)]
    results = []
    for m, n in shapes:
        t = inputs(m, n)
        want = reference(t)
        maps_err = errors(two_maps(t), want)
        base = time_us(lambda t=t: two_maps(t)) if CUDA else None
        default = layer_norm_grad.config(m, n, torch.device(DEVICE))
        print(f"{m}x{n}: two maps {base} us, errors dx/dg/dbeta {maps_err}; config() picks {default}",
              flush=True)
        block_n = triton.next_power_of_2(n)
        grid = (itertools.product([1, 2, 4], [4, 8], [2, 4, 8, 16], [1, 2]) if CUDA and n == 768
                else itertools.product([1, 2, 4], [4, 8], [4, 8, 16], [1]) if CUDA
                else [(1, 4, 2, 1), (4, 4, 2, 2), (2, 8, 1, 1)])
        for rows, warps, per_sm, stages in grid:
            if rows * block_n > 8192:
                continue
            choice = (rows, warps, min(triton.cdiv(m, rows), per_sm * sms), stages)
            err = errors(one_pass(t, choice), want)
            ok = all(e <= 2 * b + (1e-3 if CUDA else 1e-6) for e, b in zip(err, maps_err, strict=True))
            us = time_us(lambda c=choice, t=t: one_pass(t, c)) if CUDA else None
            print(f"  rows {rows} warps {warps} per SM {per_sm:2d} stages {stages}: {us} us "
                  f"errors {[f'{e:.1e}' for e in err]}{'' if ok else '  WRONG'}", flush=True)
            results.append(dict(shape=[m, n], rows=rows, warps=warps, per_sm=per_sm, stages=stages, us=us,
                                two_maps_us=base, errors=err, maps_errors=maps_err, ok=ok))
        timed = [r for r in results if r["shape"] == [m, n] and r["ok"] and r["us"]]
        if timed:
            best = min(timed, key=lambda r: r["us"])
            print(f"  fastest: {best}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(gpu=torch.cuda.get_device_name() if CUDA else "cpu", torch=torch.__version__,
                           results=results), f, indent=1)


if __name__ == "__main__":
    main()
