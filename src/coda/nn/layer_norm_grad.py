"""The Triton kernels behind `coda.nn.layer_norm`'s backward in one pass (imported on first use:
importing `coda` does not import Triton).

A row of a Transformer's LayerNorm (768 to 4096 values) fits in one program's registers, so its
two row sums a = Σ dxhat and b = Σ dxhat xhat are complete in the program that loaded the row,
and dx follows without reading dy and x a second time:

    dxhat = dy ⊙ g,  dx = rstd (dxhat - (a + xhat b) / n) (+ dres),  xhat = (x - mean) rstd

With `beta` it also stores the norm's output xn = xhat ⊙ g + β, the operand of the weight
gradient of a LayerNorm folded into the next GEMM (`coda.ops.layer_norm_linear`, whose backward
hands this kernel dy = the gradient at that GEMM's input).

Each program walks row blocks pid, pid + programs, ... (ROWS rows at a time). Where a warp
holds a whole row (narrow rows, `config`), the row is loaded as column chunks of a warp's width
(256 values): its sums a and b need no shared memory and no barrier, and a 768-wide row is
three chunks, not 1024 masked columns. The program keeps the parameters' gradients
dg = Σ_m dy xhat and dβ = Σ_m dy as [ROWS, CHUNK] float32 accumulators per chunk, summed over
the rows once at its end into its partials; `sum_partials` adds the programs'
partials in index order, so the result does not depend on scheduling. Against the two map
programs (row sums, then dx: dy and x read twice, row and column partials finished by a third
kernel) this reads dy and x once. With `sum_dx` a program keeps a third accumulator, the column
sums of dx as stored: the bias gradient of the layer that receives dx as its output's gradient
(the GEMM before the norm on a residual stream: GPT-2's fc2 and out projection, BERT's), whose
backward then need not sum its columns again (coda.ops.common.known_column_sums).
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from ..codegen.kernel import launch_cached


@triton.jit
def layer_norm_backward(DY, X, DRES, DX, G, BETA, XN, SHIFT, S, SS, PARTIALS, M, N, stride_dy, stride_x,
                        stride_dres, stride_dx, stride_xn, stride_shift, inv_n, eps,
                        ROWS: tl.constexpr, CHUNK: tl.constexpr, CHUNKS: tl.constexpr,
                        HAS_DRES: tl.constexpr, NEED_DX: tl.constexpr, NEED_PARAMS: tl.constexpr,
                        SAVE_XN: tl.constexpr, SUM_DX: tl.constexpr, STAGES: tl.constexpr):
    """ROWS rows a step, each as CHUNKS column chunks of CHUNK values (tuples of [ROWS, CHUNK]
    tensors: a 768-wide row is three chunks of 256, no padding to 1024). Where ROWS is the
    number of warps, Triton lays each row on one warp and a row's sums take warp shuffles only."""
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    chunk_cols = tl.arange(0, CHUNK)
    zeros = ()
    for _ in tl.static_range(CHUNKS):
        zeros += (tl.zeros([ROWS, CHUNK], tl.float32),)
    dg, dbeta, dx_sums = zeros, zeros, zeros
    for block in tl.range(pid, tl.cdiv(M, ROWS), programs, num_stages=STAGES):
        rows = block * ROWS + tl.arange(0, ROWS)
        row_in = rows < M
        # the row's statistics from its shifted sums, as LN_ROW computes them (coda.ops.norms)
        m = tl.load(S + rows, mask=row_in, other=0.0) * inv_n
        ss = tl.load(SS + rows, mask=row_in, other=0.0)
        mean = tl.load(SHIFT + rows * stride_shift, mask=row_in, other=0.0).to(tl.float32) + m
        rstd = tl.rsqrt(tl.maximum(ss * inv_n - m * m, 0.0) + eps)
        a, b = tl.zeros([ROWS], tl.float32), tl.zeros([ROWS], tl.float32)
        dys, xhats = (), ()
        for c in tl.static_range(CHUNKS):   # load the row, form a = Σ dxhat, b = Σ dxhat xhat
            cols = c * CHUNK + chunk_cols
            inside = row_in[:, None] & (cols < N)[None, :]
            dy = tl.load(DY + rows[:, None] * stride_dy + cols[None, :], mask=inside,
                         other=0.0).to(tl.float32)
            x = tl.load(X + rows[:, None] * stride_x + cols[None, :], mask=inside, other=0.0).to(tl.float32)
            xhat = tl.where(inside, (x - mean[:, None]) * rstd[:, None], 0.0)
            if NEED_DX:
                dxhat = dy * tl.load(G + cols, mask=cols < N, other=0.0).to(tl.float32)[None, :]
                a += tl.sum(dxhat, axis=1)
                b += tl.sum(dxhat * xhat, axis=1)
            dys += (dy,)
            xhats += (xhat,)
        sums_dg, sums_dbeta, sums_dx = (), (), ()
        for c in tl.static_range(CHUNKS):   # dx, xn and the parameters' sums from the held row
            cols = c * CHUNK + chunk_cols
            inside = row_in[:, None] & (cols < N)[None, :]
            g = tl.load(G + cols, mask=cols < N, other=0.0).to(tl.float32)[None, :]
            if NEED_DX:
                dx = rstd[:, None] * (dys[c] * g - (a[:, None] + xhats[c] * b[:, None]) * inv_n)
                if HAS_DRES:
                    dx += tl.load(DRES + rows[:, None] * stride_dres + cols[None, :], mask=inside,
                                  other=0.0).to(tl.float32)
                dx = dx.to(DX.dtype.element_ty)
                tl.store(DX + rows[:, None] * stride_dx + cols[None, :], dx, mask=inside)
                if SUM_DX:   # the values as stored (past N dx is not zero: -rstd a / n)
                    sums_dx += (dx_sums[c] + tl.where(inside, dx.to(tl.float32), 0.0),)
            if SAVE_XN:
                beta = tl.load(BETA + cols, mask=cols < N, other=0.0).to(tl.float32)[None, :]
                tl.store(XN + rows[:, None] * stride_xn + cols[None, :],
                         (xhats[c] * g + beta).to(XN.dtype.element_ty), mask=inside)
            if NEED_PARAMS:
                sums_dg += (dg[c] + dys[c] * xhats[c],)
                sums_dbeta += (dbeta[c] + dys[c],)
        if NEED_PARAMS:
            dg, dbeta = sums_dg, sums_dbeta
        if SUM_DX:
            dx_sums = sums_dx
    for c in tl.static_range(CHUNKS):   # partials [2 or 3, programs, N]: dg's, dβ's, dx's column sums
        cols = c * CHUNK + chunk_cols
        if NEED_PARAMS:
            tl.store(PARTIALS + pid * N + cols, tl.sum(dg[c], axis=0), mask=cols < N)
            tl.store(PARTIALS + (programs + pid) * N + cols, tl.sum(dbeta[c], axis=0), mask=cols < N)
        if SUM_DX:
            tl.store(PARTIALS + (2 * programs + pid) * N + cols, tl.sum(dx_sums[c], axis=0), mask=cols < N)


@triton.jit
def sum_partials(PARTIALS, DG, DBETA, DX_SUMS, N, parts, FIRST: tl.constexpr, VECTORS: tl.constexpr,
                 BLOCK_P: tl.constexpr, BLOCK_C: tl.constexpr):
    """dg, dβ and dx's column sums from the [VECTORS, parts, N] partials, read as [parts,
    VECTORS N] columns from vector FIRST on (2 where only dx's sums were kept): program i sums
    BLOCK_C of those columns over every partial, BLOCK_P partials a step in index order. Narrow
    column blocks over many programs, each loading all of its partials at once: the sum is a
    few MB read by programs that wait on memory, so it is their number that makes it fast."""
    cols = FIRST * N + tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    which = cols // N        # 0: dg, 1: dβ, 2: dx's column sums
    col = cols % N
    col_in = cols < VECTORS * N
    total = tl.zeros([BLOCK_C], tl.float32)
    for p0 in range(0, parts, BLOCK_P):
        p = p0 + tl.arange(0, BLOCK_P)
        at = (which * parts * N + col)[None, :] + p[:, None] * N
        total += tl.sum(tl.load(PARTIALS + at, mask=(p < parts)[:, None] & col_in[None, :], other=0.0),
                        axis=0)
    if FIRST == 0:
        tl.store(DG + col, total.to(DG.dtype.element_ty), mask=col_in & (which == 0))
        tl.store(DBETA + col, total.to(DBETA.dtype.element_ty), mask=col_in & (which == 1))
    if VECTORS == 3:
        tl.store(DX_SUMS + col, total.to(DX_SUMS.dtype.element_ty), mask=col_in & (which == 2))


@functools.cache
def sm_count(device: torch.device) -> int:
    """The SMs of a CUDA device (2 under the interpreter): the programs' count follows it. Cached:
    every launch asks."""
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 2


def config(m: int, n: int, device: torch.device) -> tuple[int, int, int, int]:
    """(ROWS, warps, programs, STAGES) for an [m, n] backward, as measured on the H200
    (docs/performance.md). Up to 768 values a row: one row a program of one warp, eight programs
    per SM, three pipeline stages (GPT-2's 16384 x 768 with dres, dg, dβ and dx's column sums:
    40.7 µs a launch against 52.4 for two 1024-wide rows over four warps, forty-sixth session).
    Wider rows, where chunks of a warp's width measured slower (16384 x 1024: 71.7 against 56.9
    µs): two rows a step over four warps up to 1024, then one row across four or eight warps, four
    programs per SM (more write more partials; fewer leave memory idle)."""
    sms = sm_count(device)
    if n <= 768:
        rows, warps, per_sm, stages = 1, 1, 8, 3
    elif n <= 1024:
        rows, warps, per_sm, stages = 2, 4, 4, 3
    else:
        rows, warps, per_sm, stages = 1, 8 if n > 2048 else 4, 4, 1
    return rows, warps, min(triton.cdiv(m, rows), per_sm * sms), stages


def chunk(rows: int, warps: int, n: int) -> int:
    """The values of a row the backward loads as one tensor: where each row has a warp to itself,
    256 (32 threads reading 8 two-byte values each), so that a row's sums are warp shuffles and a
    768-wide row is three chunks, not 1024 masked columns; where warps share rows, the whole row
    rounded up to a power of two (one chunk, the faster layout there)."""
    whole = triton.next_power_of_2(n)
    return min(256, whole) if warps <= rows else whole


def unit_columns(t: torch.Tensor) -> torch.Tensor:
    """t, or a copy of it whose values are adjacent along a row: the kernels index a row by one
    stride."""
    return t if t.stride(1) == 1 else t.contiguous()


def launch(dy: torch.Tensor, x: torch.Tensor, g: torch.Tensor, shift: torch.Tensor, s: torch.Tensor,
           ss: torch.Tensor, inv_n: float, eps: float, dres: torch.Tensor | None, need_dx: bool,
           param_dtypes: tuple[torch.dtype, torch.dtype] | None,
           choice: tuple[int, int, int, int] | None = None, beta: torch.Tensor | None = None,
           sum_dx: torch.dtype | None = None) -> tuple[torch.Tensor | None, ...]:
    """(dx, dg, dβ, xn, dx_sums) of LayerNorm over the rows of x [M, N], from dy [M, N] and the
    row sums (shift, s, ss: coda.ops.norms's LN_ROW), plus dres [M, N] in dx when given; dx only
    with `need_dx`, dg and dβ (in `param_dtypes`) only when those are given, the norm's output
    xn = xhat ⊙ g + β (in x's dtype) only with `beta`, dx's column sums (summed in float32)
    stored in the dtype `sum_dx` only when that is given (and dx). `choice` overrides `config`."""
    m, n = x.shape
    sum_dx = sum_dx if need_dx else None
    dy, x = unit_columns(dy), unit_columns(x)
    dres = unit_columns(dres) if dres is not None else None
    dx = torch.empty((m, n), device=x.device, dtype=dy.dtype) if need_dx else None
    xn = torch.empty((m, n), device=x.device, dtype=x.dtype) if beta is not None else None
    # sum_partials writes every value of dg, dβ and dx's sums: zero-filled only where no row runs
    fill = torch.zeros if m == 0 else torch.empty
    dg, dbeta = ((fill(n, device=x.device, dtype=dtype) for dtype in param_dtypes)
                 if param_dtypes else (None, None))
    dx_sums = fill(n, device=x.device, dtype=sum_dx) if sum_dx else None
    if m == 0:
        return dx, dg, dbeta, xn, dx_sums
    rows, warps, programs, stages = choice or config(m, n, x.device)
    width = chunk(rows, warps, n)
    vectors = 3 if sum_dx else 2 if param_dtypes else 0
    partials = torch.empty((vectors, programs, n), device=x.device, dtype=torch.float32) if vectors else None
    unused = dy   # stands in for the pointers a launch does not use
    launch_cached(layer_norm_backward, (programs,), [
        dy, x, unused if dres is None else dres, unused if dx is None else dx, g,
        g if beta is None else beta, unused if xn is None else xn, shift, s, ss,
        unused if partials is None else partials, m, n, dy.stride(0), x.stride(0),
        0 if dres is None else dres.stride(0), 0 if dx is None else dx.stride(0),
        0 if xn is None else xn.stride(0), shift.stride(0), float(inv_n), float(eps)],
        dict(ROWS=rows, CHUNK=width, CHUNKS=triton.cdiv(n, width), HAS_DRES=dres is not None, NEED_DX=need_dx,
             NEED_PARAMS=param_dtypes is not None, SAVE_XN=xn is not None, SUM_DX=sum_dx is not None,
             STAGES=stages, num_warps=warps), x.device)
    if vectors:
        first = 0 if param_dtypes else 2
        block_p = min(1024, triton.next_power_of_2(programs))
        block_c = max(8, 8192 // block_p)
        launch_cached(sum_partials, (triton.cdiv((vectors - first) * n, block_c),),
                      [partials, dg if param_dtypes else partials, dbeta if param_dtypes else partials,
                       partials if dx_sums is None else dx_sums, n, programs],
                      dict(FIRST=first, VECTORS=vectors, BLOCK_P=block_p, BLOCK_C=block_c, num_warps=8),
                      x.device)
    return dx, dg, dbeta, xn, dx_sums
