"""Thirty-seventh session, call 4: `coda.nn.layer_norm_grad`'s row kernel with the next row
block's loads issued before the current block's arithmetic (registers double-buffered by hand),
against the kernel as merged, at GPT-2's LayerNorm (16384 x 768, bf16, with dres), µs from CUDA
graphs, the partials' sum included; each variant's outputs checked against the merged kernel's.

    PYTHONPATH=$PWD/src python benchmarks/results/session37/ln_prefetch_probe.py
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from coda.nn import layer_norm_grad

CUDA = torch.cuda.is_available()
DEVICE, DTYPE = ("cuda", torch.bfloat16) if CUDA else ("cpu", torch.float32)


@triton.jit
def _load_block(DY, X, DRES, block, M, N, stride_dy, stride_x, stride_dres, ROWS: tl.constexpr,
                BLOCK_N: tl.constexpr):
    rows = block * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_N)
    inside = (rows < M)[:, None] & (cols < N)[None, :]
    dy = tl.load(DY + rows[:, None] * stride_dy + cols[None, :], mask=inside, other=0.0)
    x = tl.load(X + rows[:, None] * stride_x + cols[None, :], mask=inside, other=0.0)
    dres = tl.load(DRES + rows[:, None] * stride_dres + cols[None, :], mask=inside, other=0.0)
    return dy, x, dres


@triton.jit
def prefetching(DY, X, DRES, DX, G, SHIFT, S, SS, PARTIALS, M, N, stride_dy, stride_x, stride_dres,
                stride_dx, stride_shift, inv_n, eps, ROWS: tl.constexpr, BLOCK_N: tl.constexpr):
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_N)
    col_in = cols < N
    g = tl.load(G + cols, mask=col_in, other=0.0).to(tl.float32)
    dg = tl.zeros([ROWS, BLOCK_N], tl.float32)
    dbeta = tl.zeros([ROWS, BLOCK_N], tl.float32)
    dy_next, x_next, dres_next = _load_block(DY, X, DRES, pid, M, N, stride_dy, stride_x, stride_dres,
                                             ROWS, BLOCK_N)
    for block in range(pid, tl.cdiv(M, ROWS), programs):
        dy, x, dres = dy_next.to(tl.float32), x_next.to(tl.float32), dres_next.to(tl.float32)
        dy_next, x_next, dres_next = _load_block(DY, X, DRES, block + programs, M, N, stride_dy,
                                                 stride_x, stride_dres, ROWS, BLOCK_N)
        rows = block * ROWS + tl.arange(0, ROWS)
        row_in = rows < M
        inside = row_in[:, None] & col_in[None, :]
        m = tl.load(S + rows, mask=row_in, other=0.0) * inv_n
        ss = tl.load(SS + rows, mask=row_in, other=0.0)
        mean = tl.load(SHIFT + rows * stride_shift, mask=row_in, other=0.0).to(tl.float32) + m
        rstd = tl.rsqrt(tl.maximum(ss * inv_n - m * m, 0.0) + eps)
        xhat = tl.where(inside, (x - mean[:, None]) * rstd[:, None], 0.0)
        dxhat = dy * g[None, :]
        a = tl.sum(dxhat, axis=1)
        b = tl.sum(dxhat * xhat, axis=1)
        dx = rstd[:, None] * (dxhat - (a[:, None] + xhat * b[:, None]) * inv_n) + dres
        tl.store(DX + rows[:, None] * stride_dx + cols[None, :], dx.to(DX.dtype.element_ty), mask=inside)
        dg += dy * xhat
        dbeta += dy
    tl.store(PARTIALS + pid * N + cols, tl.sum(dg, axis=0), mask=col_in)
    tl.store(PARTIALS + (programs + pid) * N + cols, tl.sum(dbeta, axis=0), mask=col_in)


def prefetched(t: dict, rows: int, warps: int, programs: int):
    m, n = t["x"].shape
    dx = torch.empty_like(t["dy"])
    partials = torch.empty((2, programs, n), device=DEVICE, dtype=torch.float32)
    prefetching[(programs,)](t["dy"], t["x"], t["dres"], dx, t["g"], t["shift"], t["s"], t["ss"], partials,
                             m, n, n, n, n, n, t["shift"].stride(0), t["inv_n"], t["eps"], ROWS=rows,
                             BLOCK_N=triton.next_power_of_2(n), num_warps=warps)
    dg, dbeta = (torch.empty(n, device=DEVICE, dtype=t["g"].dtype) for _ in range(2))
    block_p = min(1024, triton.next_power_of_2(programs))
    block_c = max(8, 8192 // block_p)
    layer_norm_grad.sum_partials[(triton.cdiv(2 * n, block_c),)](
        partials, dg, dbeta, n, programs, BLOCK_P=block_p, BLOCK_C=block_c, num_warps=8)
    return dx, dg, dbeta


def merged(t: dict, choice=None):
    return layer_norm_grad.launch(t["dy"], t["x"], t["g"], t["shift"], t["s"], t["ss"], t["inv_n"], t["eps"],
                                  t["dres"], True, (t["g"].dtype, t["g"].dtype), choice)


def main() -> None:
    from ln_grad_probe import inputs, time_us

    m, n = (16384, 768) if CUDA else (70, 48)
    sms = torch.cuda.get_device_properties(0).multi_processor_count if CUDA else 2
    t = inputs(m, n)
    want = merged(t)
    if CUDA:
        default = layer_norm_grad.config(m, n, t["x"].device)
        print(f"merged config {default}: {time_us(lambda: merged(t)):.1f} us")
        for rows, warps, per_sm, stages in [(2, 4, 4, 3), (4, 4, 4, 3), (4, 4, 2, 3), (2, 4, 3, 2),
                                            (2, 4, 5, 2)]:
            choice = (rows, warps, per_sm * sms, stages)
            print(f"merged kernel rows {rows} warps {warps} per SM {per_sm} stages {stages}: "
                  f"{time_us(lambda c=choice: merged(t, c)):.1f} us", flush=True)
    for rows, warps, per_sm in ([(1, 4, 4), (2, 4, 4), (2, 4, 2), (4, 4, 2), (4, 4, 4), (2, 4, 8), (1, 4, 8)]
                                if CUDA else [(2, 4, 1), (4, 4, 2)]):
        programs = min(triton.cdiv(m, rows), per_sm * sms)
        got = prefetched(t, rows, warps, programs)
        same = all(torch.allclose(a.float(), b.float(), rtol=1e-2, atol=1e-2)
                   for a, b in zip(got, want, strict=True))
        us = time_us(lambda r=rows, w=warps, p=programs: prefetched(t, r, w, p)) if CUDA else float("nan")
        print(f"prefetching rows {rows} warps {warps} per SM {per_sm}: {us:.1f} us"
              f"{'' if same else '  OUTPUTS DIFFER'}", flush=True)


if __name__ == "__main__":
    main()
