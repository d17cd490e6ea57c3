"""Twentieth session, for the next: can LayerNorm's backward beat its two maps in one pass?

    python ln_probe.py [--json out.json]          (GPU: timings; CPU + TRITON_INTERPRET=1: checks)

`coda.nn.layer_norm`'s backward is two map programs (row and column sums, then dx): 24 + 19 µs
at 16384 x 768 bf16 on the H200, plus about 5 µs of finishing. A first one-pass kernel (whole
rows, 4 rows of 1024 lanes a step, the dg/dβ column sums reduced across warps at every step)
took 36.8 µs, and the sum of its per-program partials 13.9 (docs/performance.md, twentieth
session). This times variants that avoid what that one paid for: the column sums kept as
[BLOCK_M, BLOCK_N] accumulators and reduced once per program, 1 to 8 rows a step, 4 or 8
warps, 2 to 8 programs per SM; the partials summed by torch (two reductions). Every variant's
dx, dg and dβ are checked against the maps' before it is timed.
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import json

import torch
import triton
import triton.language as tl
import triton.testing

from coda.ops.norms import row_shift

ln = importlib.import_module("coda.nn.layer_norm")   # the module (coda.nn.layer_norm is the function)


@triton.jit
def one_pass_kernel(dy_ptr, x_ptr, dx_ptr, g_ptr, shift_ptr, s_ptr, ss_ptr, partial_ptr, M, N,
                    rows_per_program, inv_n, eps, stride_shift,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """dx for `rows_per_program` contiguous rows, BLOCK_M whole rows a step; dg = Σ dy xhat and
    dβ = Σ dy accumulated per element and reduced over the rows once, into this program's
    partials ([2, programs, N])."""
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    col_in = cols < N
    g = tl.load(g_ptr + cols, mask=col_in, other=0.0).to(tl.float32)
    dg = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    dbeta = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    first = pid * rows_per_program
    last = tl.minimum(first + rows_per_program, M)
    for start in range(first, last, BLOCK_M):
        rows = start + tl.arange(0, BLOCK_M)
        row_in = rows < last
        inside = row_in[:, None] & col_in[None, :]
        at = rows[:, None] * N + cols[None, :]
        dy = tl.load(dy_ptr + at, mask=inside, other=0.0).to(tl.float32)
        x = tl.load(x_ptr + at, mask=inside, other=0.0).to(tl.float32)
        m = tl.load(s_ptr + rows, mask=row_in, other=0.0) * inv_n
        ss = tl.load(ss_ptr + rows, mask=row_in, other=0.0)
        shift = tl.load(shift_ptr + rows * stride_shift, mask=row_in, other=0.0).to(tl.float32)
        rstd = tl.rsqrt(tl.maximum(ss * inv_n - m * m, 0.0) + eps)
        xhat = tl.where(inside, (x - (shift + m)[:, None]) * rstd[:, None], 0.0)
        dxhat = dy * g[None, :]
        a = tl.sum(dxhat, axis=1)
        b = tl.sum(dxhat * xhat, axis=1)
        dx = rstd[:, None] * (dxhat - (a[:, None] + xhat * b[:, None]) * inv_n)
        tl.store(dx_ptr + at, dx.to(dx_ptr.dtype.element_ty), mask=inside)
        dg += dy * xhat
        dbeta += dy
    programs = tl.num_programs(0)
    tl.store(partial_ptr + pid * N + cols, tl.sum(dg, axis=0), mask=col_in)
    tl.store(partial_ptr + (programs + pid) * N + cols, tl.sum(dbeta, axis=0), mask=col_in)


def one_pass(dy, x, g, row, block_m, warps, per_sm, sms):
    m, n = x.shape
    block_n = triton.next_power_of_2(n)
    programs = min(triton.cdiv(m, block_m), per_sm * sms)
    rows_per_program = triton.cdiv(triton.cdiv(m, programs), block_m) * block_m
    programs = triton.cdiv(m, rows_per_program)
    dx = torch.empty_like(x)
    partials = torch.empty((2, programs, n), device=x.device, dtype=torch.float32)
    one_pass_kernel[(programs,)](dy, x, dx, g, row["shift"], row["s"], row["ss"], partials, m, n,
                                 rows_per_program, row["inv_n"], row["eps"], row["shift"].stride(0),
                                 BLOCK_M=block_m, BLOCK_N=block_n, num_warps=warps)
    return dx, partials[0].sum(0).to(g.dtype), partials[1].sum(0).to(g.dtype)


def two_maps(dy, x, g, row):
    """coda.nn.layer_norm's backward as it is: LN_GRAD_SUMS then LN_GRAD_DX."""
    sums = ln.LN_GRAD_SUMS.map(dy, **row, g=g, xin=x, outputs=["a", "b", "dg", "dbeta"],
                               dtypes={"dg": g.dtype, "dbeta": g.dtype})
    dx = ln.LN_GRAD_DX[False].map(dy, **row, g=g, xin=x, a=sums["a"], b=sums["b"])["output"]
    return dx, sums["dg"], sums["dbeta"]


def time_ms(fn) -> float:
    """Median ms of `fn` replayed from a CUDA graph: these kernels take tens of microseconds,
    less than their launches' host time (timed with do_bench, the twenty-first session's first
    run of this probe measured the host: 135 us for the two maps that take 48 in a graph)."""
    fn()
    return triton.testing.do_bench_cudagraph(fn, return_mode="median")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json")
    args = parser.parse_args()
    cuda = torch.cuda.is_available()
    device, dtype = ("cuda", torch.bfloat16) if cuda else ("cpu", torch.float32)
    shapes = [(16384, 768), (16384, 1024), (8192, 4096)] if cuda else [(70, 48)]
    sms = torch.cuda.get_device_properties(0).multi_processor_count if cuda else 2
    variants = (list(itertools.product([1, 2, 4, 8], [4, 8], [2, 4, 8])) if cuda
                else [(1, 4, 2), (4, 4, 2)])
    results = []
    for m, n in shapes:
        torch.manual_seed(0)
        x = (torch.randn(m, n, device=device) + 1.0).to(dtype)
        dy = torch.randn(m, n, device=device).to(dtype)
        g = (1.0 + 0.2 * torch.randn(n, device=device)).to(dtype)
        xf = x.float()
        row = dict(shift=row_shift(x, False), s=xf.sum(-1), ss=(xf * xf).sum(-1), inv_n=1.0 / n, eps=1e-5)
        want = two_maps(dy, x, g, row)
        base = time_ms(lambda: two_maps(dy, x, g, row)) if cuda else None
        print(f"{m}x{n}: two maps {base} ms")
        for block_m, warps, per_sm in variants:
            if block_m * triton.next_power_of_2(n) > 16384:
                continue
            got = one_pass(dy, x, g, row, block_m, warps, per_sm, sms)
            errors = [((a.float() - b.float()).norm() / b.float().norm()).item()
                      for a, b in zip(got, want, strict=True)]
            ms = time_ms(lambda: one_pass(dy, x, g, row, block_m, warps, per_sm, sms)) if cuda else None
            print(f"  rows {block_m} warps {warps} per SM {per_sm}: {ms} ms, rel. diff to the maps "
                  f"dx/dg/dbeta {errors[0]:.1e}/{errors[1]:.1e}/{errors[2]:.1e}")
            assert max(errors) < (2e-2 if cuda else 1e-5), errors
            results.append(dict(shape=[m, n], block_m=block_m, warps=warps, per_sm=per_sm, ms=ms,
                                two_maps_ms=base, rel_diff=errors))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(gpu=torch.cuda.get_device_name() if cuda else "cpu", results=results), f, indent=1)


if __name__ == "__main__":
    main()
