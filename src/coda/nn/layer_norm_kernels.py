"""The Triton kernels of `coda.nn.layer_norm`'s one-pass backward (written by hand: a row that
spans one program is not an epilogue's tile). Imported on first use, as the generated kernels are."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def row_grad_kernel(dy_ptr, x_ptr, dres_ptr, dx_ptr, g_ptr, shift_ptr, s_ptr, ss_ptr, partial_ptr,
                    M, N, rows_per_program, inv_n, eps,
                    stride_dy_m, stride_dy_n, stride_x_m, stride_x_n, stride_res_m, stride_res_n,
                    stride_shift, HAS_DRES: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """LayerNorm's dx for `rows_per_program` rows, BLOCK_M whole rows (BLOCK_N >= N) at a time,
    and this program's partial column sums dg = Σ dy xhat and dβ = Σ dy (rows of `partial_ptr`,
    [2, programs, N]). mean and rstd come from the shifted row sums as in LN_ROW."""
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    col_in = cols < N
    g = tl.load(g_ptr + cols, mask=col_in, other=0.0).to(tl.float32)
    dg = tl.zeros([BLOCK_N], tl.float32)
    dbeta = tl.zeros([BLOCK_N], tl.float32)
    first = pid * rows_per_program
    last = tl.minimum(first + rows_per_program, M)
    for start in range(first, last, BLOCK_M):
        rows = start + tl.arange(0, BLOCK_M)
        row_in = rows < last
        inside = row_in[:, None] & col_in[None, :]
        dy = tl.load(dy_ptr + rows[:, None] * stride_dy_m + cols[None, :] * stride_dy_n, mask=inside,
                     other=0.0).to(tl.float32)
        x = tl.load(x_ptr + rows[:, None] * stride_x_m + cols[None, :] * stride_x_n, mask=inside,
                    other=0.0).to(tl.float32)
        s = tl.load(s_ptr + rows, mask=row_in, other=0.0)
        ss = tl.load(ss_ptr + rows, mask=row_in, other=0.0)
        shift = tl.load(shift_ptr + rows * stride_shift, mask=row_in, other=0.0).to(tl.float32)
        m = s * inv_n
        rstd = tl.rsqrt(tl.maximum(ss * inv_n - m * m, 0.0) + eps)
        xhat = tl.where(inside, (x - (shift + m)[:, None]) * rstd[:, None], 0.0)
        dxhat = dy * g[None, :]
        a = tl.sum(dxhat, axis=1)
        b = tl.sum(dxhat * xhat, axis=1)
        dx = rstd[:, None] * (dxhat - (a[:, None] + xhat * b[:, None]) * inv_n)
        if HAS_DRES:
            dx += tl.load(dres_ptr + rows[:, None] * stride_res_m + cols[None, :] * stride_res_n,
                          mask=inside, other=0.0).to(tl.float32)
        tl.store(dx_ptr + rows[:, None] * N + cols[None, :], dx.to(dx_ptr.dtype.element_ty), mask=inside)
        dg += tl.sum(dy * xhat, axis=0)
        dbeta += tl.sum(dy, axis=0)
    programs = tl.num_programs(0)
    tl.store(partial_ptr + pid * N + cols, dg, mask=col_in)
    tl.store(partial_ptr + (programs + pid) * N + cols, dbeta, mask=col_in)


@triton.jit
def column_sums_kernel(partial_ptr, dg_ptr, dbeta_ptr, programs, N, BLOCK_P: tl.constexpr,
                       BLOCK_N: tl.constexpr):
    """dg and dβ: the sums of `row_grad_kernel`'s partials ([2, programs, N]) over its programs,
    BLOCK_N columns a program, in index order (deterministic), stored in their own dtypes."""
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_in = cols < N
    dg = tl.zeros([BLOCK_N], tl.float32)
    dbeta = tl.zeros([BLOCK_N], tl.float32)
    for p0 in range(0, programs, BLOCK_P):
        p = p0 + tl.arange(0, BLOCK_P)
        inside = (p < programs)[:, None] & col_in[None, :]
        at = p[:, None] * N + cols[None, :]
        dg += tl.sum(tl.load(partial_ptr + at, mask=inside, other=0.0), axis=0)
        dbeta += tl.sum(tl.load(partial_ptr + programs * N + at, mask=inside, other=0.0), axis=0)
    tl.store(dg_ptr + cols, dg.to(dg_ptr.dtype.element_ty), mask=col_in)
    tl.store(dbeta_ptr + cols, dbeta.to(dbeta_ptr.dtype.element_ty), mask=col_in)
