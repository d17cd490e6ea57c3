"""The Triton kernels behind `coda.nn.layer_norm`'s backward in one pass, and RMSNorm's (imported
on first use: importing `coda` does not import Triton).

A row of a Transformer's norm (768 to 4096 values) fits in one program's registers, so its two
row sums a = Σ dxhat and b = Σ dxhat xhat are complete in the program that loaded the row, and
dx follows without reading dy and x a second time:

    dxhat = dy ⊙ g,  dx = rstd (dxhat - (a + xhat b) / n) (+ dres),  xhat = (x - mean) rstd

RMSNorm (`RMS`) is the same with mean = 0, rstd = rsqrt(Σ x² / n + eps), no a term and no β:
dx = rstd (dxhat - xhat b / n). With `save_xn` the kernel also stores the norm's output
xn = xhat ⊙ g (+ β), the operand of the weight gradient of a norm folded into the next GEMM
(`coda.ops.layer_norm_linear`, `rms_norm_linear`, whose backwards hand this kernel dy = the
gradient at that GEMM's input).

Each program walks row blocks pid, pid + programs, ... (ROWS rows at a time), reading a block's
dy, x and dres at the start of its step (dres late, where dx is formed, cost 10% at 2048 and
4096 columns); with one-warp programs (narrow rows) it loads the next block's while it works on
the one it holds. Where a warp holds a whole row (narrow rows, `config`), the row is loaded as
column chunks of a warp's width (256 values): its sums a and b need no shared memory and no
barrier, and a 768-wide row is three chunks, not 1024 masked columns. The program keeps the
parameters' gradients dg = Σ_m dy xhat and dβ = Σ_m dy as [ROWS, CHUNK] float32 accumulators per
chunk, summed over the rows once at its end into its partials (dβ's only for LayerNorm);
`sum_partials` adds the programs' partials in index order, so the result does not depend on
scheduling. Against the two map programs (row sums, then dx: dy and x read twice, row and column
partials finished by a third kernel) this reads dy and x once. With `sum_dx` a program keeps a
third accumulator, the column sums of dx as stored: the bias gradient of the layer that receives
dx as its output's gradient (the GEMM before the norm on a residual stream: GPT-2's fc2 and out
projection, BERT's), whose backward then need not sum its columns again
(coda.ops.common.known_column_sums).
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from ..codegen.kernel import launch_cached


@triton.jit
def load_rows(DY, X, DRES, SHIFT, S, SS, rows, M, N, stride_dy, stride_x, stride_dres, stride_shift,
              CHUNK: tl.constexpr, CHUNKS: tl.constexpr, RMS: tl.constexpr, HAS_DRES: tl.constexpr):
    """What the rows' step reads, as stored: their sums (ss, s, shift; ss and s in float32,
    whatever dtype a caller's sumsq came in) and dy, x, dres as tuples of chunks (dres: dy's
    where there is none; never read then)."""
    row_in = rows < M
    ss = tl.load(SS + rows, mask=row_in, other=0.0).to(tl.float32)
    if RMS:
        s, shift = ss, ss
    else:
        s = tl.load(S + rows, mask=row_in, other=0.0).to(tl.float32)
        shift = tl.load(SHIFT + rows * stride_shift, mask=row_in, other=0.0).to(tl.float32)
    dys, xs, dress = (), (), ()
    for c in tl.static_range(CHUNKS):
        cols = c * CHUNK + tl.arange(0, CHUNK)
        inside = row_in[:, None] & (cols < N)[None, :]
        dy = tl.load(DY + rows[:, None] * stride_dy + cols[None, :], mask=inside, other=0.0)
        dys += (dy,)
        xs += (tl.load(X + rows[:, None] * stride_x + cols[None, :], mask=inside, other=0.0),)
        if HAS_DRES:
            dress += (tl.load(DRES + rows[:, None] * stride_dres + cols[None, :], mask=inside, other=0.0),)
        else:
            dress += (dy,)
    return ss, s, shift, dys, xs, dress


@triton.jit
def layer_norm_backward(DY, X, DRES, DX, G, BETA, XN, SHIFT, S, SS, PARTIALS, M, N, stride_dy, stride_x,
                        stride_dres, stride_dx, stride_xn, stride_shift, inv_n, eps,
                        ROWS: tl.constexpr, CHUNK: tl.constexpr, CHUNKS: tl.constexpr, RMS: tl.constexpr,
                        HAS_DRES: tl.constexpr, NEED_DX: tl.constexpr, NEED_PARAMS: tl.constexpr,
                        SAVE_XN: tl.constexpr, SUM_DX: tl.constexpr, STAGES: tl.constexpr):
    """ROWS rows a step, each as CHUNKS column chunks of CHUNK values (tuples of [ROWS, CHUNK]
    tensors: a 768-wide row is three chunks of 256, no padding to 1024). Where ROWS is the
    number of warps, Triton lays each row on one warp and a row's sums take warp shuffles only.
    STAGES > 0: Triton's software pipeline (through shared memory) of that depth; STAGES = 0:
    each step issues the loads of the program's next rows before it works on the rows it holds,
    a prefetch in registers. PARTIALS holds [programs, N] float32 slots: dg's, then dβ's
    (LayerNorm), then dx's column sums, each only where kept. SHIFT, S and BETA are not read for
    RMSNorm."""
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    chunk_cols = tl.arange(0, CHUNK)
    zeros = ()
    for _ in tl.static_range(CHUNKS):
        zeros += (tl.zeros([ROWS, CHUNK], tl.float32),)
    dg, dbeta, dx_sums = zeros, zeros, zeros
    if STAGES == 0:
        ahead = load_rows(DY, X, DRES, SHIFT, S, SS, pid * ROWS + tl.arange(0, ROWS), M, N, stride_dy,
                          stride_x, stride_dres, stride_shift, CHUNK, CHUNKS, RMS, HAS_DRES)
    for block in tl.range(pid, tl.cdiv(M, ROWS), programs, num_stages=max(STAGES, 1)):
        rows = block * ROWS + tl.arange(0, ROWS)
        row_in = rows < M
        if STAGES == 0:
            ss, s, shift, dys_in, xs_in, dress_in = ahead
            ahead = load_rows(DY, X, DRES, SHIFT, S, SS, rows + programs * ROWS, M, N, stride_dy,
                              stride_x, stride_dres, stride_shift, CHUNK, CHUNKS, RMS, HAS_DRES)
        else:
            ss, s, shift, dys_in, xs_in, dress_in = load_rows(
                DY, X, DRES, SHIFT, S, SS, rows, M, N, stride_dy, stride_x, stride_dres, stride_shift,
                CHUNK, CHUNKS, RMS, HAS_DRES)
        # the row's statistics from its sums, as RMS_ROW and LN_ROW compute them (coda.ops.norms)
        if RMS:
            mean = tl.zeros([ROWS], tl.float32)
            rstd = tl.rsqrt(ss * inv_n + eps)
        else:
            m = s * inv_n
            mean = shift + m
            rstd = tl.rsqrt(tl.maximum(ss * inv_n - m * m, 0.0) + eps)
        a, b = tl.zeros([ROWS], tl.float32), tl.zeros([ROWS], tl.float32)
        dys, xhats = (), ()
        for c in tl.static_range(CHUNKS):   # a = Σ dxhat, b = Σ dxhat xhat
            cols = c * CHUNK + chunk_cols
            inside = row_in[:, None] & (cols < N)[None, :]
            dy = dys_in[c].to(tl.float32)
            xhat = tl.where(inside, (xs_in[c].to(tl.float32) - mean[:, None]) * rstd[:, None], 0.0)
            if NEED_DX:
                dxhat = dy * tl.load(G + cols, mask=cols < N, other=0.0).to(tl.float32)[None, :]
                if not RMS:
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
                    dx += dress_in[c].to(tl.float32)
                dx = dx.to(DX.dtype.element_ty)
                tl.store(DX + rows[:, None] * stride_dx + cols[None, :], dx, mask=inside)
                if SUM_DX:   # the values as stored (past N dx is not zero: -rstd a / n)
                    sums_dx += (dx_sums[c] + tl.where(inside, dx.to(tl.float32), 0.0),)
            if SAVE_XN:
                xn = xhats[c] * g
                if not RMS:
                    xn += tl.load(BETA + cols, mask=cols < N, other=0.0).to(tl.float32)[None, :]
                tl.store(XN + rows[:, None] * stride_xn + cols[None, :], xn.to(XN.dtype.element_ty),
                         mask=inside)
            if NEED_PARAMS:
                sums_dg += (dg[c] + dys[c] * xhats[c],)
                if not RMS:
                    sums_dbeta += (dbeta[c] + dys[c],)
        if NEED_PARAMS:
            dg = sums_dg
            if not RMS:
                dbeta = sums_dbeta
        if SUM_DX:
            dx_sums = sums_dx
    # the partials' slots: dg's and dβ's where the parameters' gradients are kept, then dx's sums
    dx_slot = (1 if RMS else 2) if NEED_PARAMS else 0
    for c in tl.static_range(CHUNKS):
        cols = c * CHUNK + chunk_cols
        if NEED_PARAMS:
            tl.store(PARTIALS + pid * N + cols, tl.sum(dg[c], axis=0), mask=cols < N)
            if not RMS:
                tl.store(PARTIALS + (programs + pid) * N + cols, tl.sum(dbeta[c], axis=0), mask=cols < N)
        if SUM_DX:
            tl.store(PARTIALS + (dx_slot * programs + pid) * N + cols, tl.sum(dx_sums[c], axis=0),
                     mask=cols < N)


@triton.jit
def sum_partials(PARTIALS, OUT0, OUT1, OUT2, N, parts, VECTORS: tl.constexpr, BLOCK_P: tl.constexpr,
                 BLOCK_C: tl.constexpr):
    """The sums over `parts` of the [VECTORS, parts, N] partials, vector i into OUTi (dg, dβ, dx's
    column sums, those kept), read as [parts, VECTORS N] columns: program i sums BLOCK_C of those
    columns over every partial, BLOCK_P partials a step in index order. Narrow column blocks
    over many programs, each loading all of its partials at once: the sum is a few MB read by
    programs that wait on memory, so it is their number that makes it fast."""
    cols = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    which = cols // N
    col = cols % N
    col_in = cols < VECTORS * N
    total = tl.zeros([BLOCK_C], tl.float32)
    for p0 in range(0, parts, BLOCK_P):
        p = p0 + tl.arange(0, BLOCK_P)
        at = (which * parts * N + col)[None, :] + p[:, None] * N
        total += tl.sum(tl.load(PARTIALS + at, mask=(p < parts)[:, None] & col_in[None, :], other=0.0),
                        axis=0)
    tl.store(OUT0 + col, total.to(OUT0.dtype.element_ty), mask=col_in & (which == 0))
    if VECTORS > 1:
        tl.store(OUT1 + col, total.to(OUT1.dtype.element_ty), mask=col_in & (which == 1))
    if VECTORS > 2:
        tl.store(OUT2 + col, total.to(OUT2.dtype.element_ty), mask=col_in & (which == 2))


@functools.cache
def sm_count(device: torch.device) -> int:
    """The SMs of a CUDA device (2 under the interpreter): the programs' count follows it. Cached:
    every launch asks."""
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 2


def config(m: int, n: int, device: torch.device) -> tuple[int, int, int, int]:
    """(ROWS, warps, programs, STAGES) for an [m, n] backward, as measured on the H200 and an H100
    (docs/performance.md). Up to 768 values a row: one row a program of one warp, eight programs
    per SM (GPT-2's 16384 x 768 with dres, dg, dβ and dx's column sums: 40.7 µs a launch against
    52.4 for two 1024-wide rows over four warps, forty-sixth session, H200), the next row loaded
    in registers while the held one is worked on (45.2 µs against 50.9 with a three-stage
    pipeline, and more programs or warps slower still, fiftieth session, H100).
    Wider rows, where chunks of a warp's width measured slower (16384 x 1024: 71.7 against 56.9
    µs): two rows a step over four warps up to 1024, then one row across four or eight warps, four
    programs per SM (more write more partials; fewer leave memory idle)."""
    sms = sm_count(device)
    if n <= 768:
        rows, warps, per_sm, stages = 1, 1, 8, 0
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


def launch(dy: torch.Tensor, x: torch.Tensor, g: torch.Tensor, ss: torch.Tensor, inv_n: float, eps: float,
           dres: torch.Tensor | None, need_dx: bool, param_dtypes: tuple[torch.dtype, ...] | None,
           shift: torch.Tensor | None = None, s: torch.Tensor | None = None,
           choice: tuple[int, int, int, int] | None = None, save_xn: bool = False,
           beta: torch.Tensor | None = None, sum_dx: torch.dtype | None = None
           ) -> tuple[torch.Tensor | None, ...]:
    """(dx, dg, dβ, xn, dx_sums) of LayerNorm over the rows of x [M, N] from dy [M, N] and the
    row sums (shift, s, ss: coda.ops.norms's LN_ROW), or of RMSNorm where `s` is None (ss = Σ x²:
    RMS_ROW); plus dres [M, N] in dx when given. dx only with `need_dx`; dg (and LayerNorm's dβ)
    only when `param_dtypes` gives their dtypes; the norm's output xn = xhat ⊙ g (+ β, which
    LayerNorm then needs) in x's dtype only with `save_xn`; dx's column sums (summed in float32)
    stored in the dtype `sum_dx` only when that is given (and dx). `choice` overrides `config`."""
    m, n = x.shape
    rms = s is None
    sum_dx = sum_dx if need_dx else None
    dy, x = unit_columns(dy), unit_columns(x)
    dres = unit_columns(dres) if dres is not None else None
    # the kernel reads these vectors densely (a strided view would be read wrong, unchecked)
    g, ss = g.contiguous(), ss.contiguous()
    s, beta = (None if v is None else v.contiguous() for v in (s, beta))
    dx = torch.empty((m, n), device=x.device, dtype=dy.dtype) if need_dx else None
    xn = torch.empty((m, n), device=x.device, dtype=x.dtype) if save_xn else None
    # sum_partials writes every value of dg, dβ and dx's sums: zero-filled only where no row runs
    fill = torch.zeros if m == 0 else torch.empty
    params = [fill(n, device=x.device, dtype=dtype) for dtype in (param_dtypes or ())][:1 if rms else 2]
    sums = params + ([fill(n, device=x.device, dtype=sum_dx)] if sum_dx else [])
    dg, dbeta = [*params, None, None][:2]
    dx_sums = sums[-1] if sum_dx else None
    if m == 0:
        return dx, dg, dbeta, xn, dx_sums
    rows, warps, programs, stages = choice or config(m, n, x.device)
    width = chunk(rows, warps, n)
    partials = torch.empty((len(sums), programs, n), device=x.device, dtype=torch.float32) if sums else None
    unused = dy   # stands in for the pointers a launch does not use
    launch_cached(layer_norm_backward, (programs,), [
        dy, x, unused if dres is None else dres, unused if dx is None else dx, g,
        g if beta is None else beta, unused if xn is None else xn, ss if shift is None else shift,
        ss if s is None else s, ss, unused if partials is None else partials, m, n, dy.stride(0), x.stride(0),
        0 if dres is None else dres.stride(0), 0 if dx is None else dx.stride(0),
        0 if xn is None else xn.stride(0), 0 if shift is None else shift.stride(0), float(inv_n), float(eps)],
        dict(ROWS=rows, CHUNK=width, CHUNKS=triton.cdiv(n, width), RMS=rms, HAS_DRES=dres is not None,
             NEED_DX=need_dx, NEED_PARAMS=bool(params), SAVE_XN=save_xn, SUM_DX=sum_dx is not None,
             STAGES=stages, num_warps=warps), x.device)
    if sums:
        block_p = min(1024, triton.next_power_of_2(programs))
        block_c = max(8, 8192 // block_p)
        outs = (sums + [sums[0]] * 2)[:3]   # the slots past the kept vectors are never written
        launch_cached(sum_partials, (triton.cdiv(len(sums) * n, block_c),), [partials, *outs, n, programs],
                      dict(VECTORS=len(sums), BLOCK_P=block_p, BLOCK_C=block_c, num_warps=8), x.device)
    return dx, dg, dbeta, xn, dx_sums
