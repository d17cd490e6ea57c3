"""The Triton kernel behind `coda.nn.layer_norm`'s forward in one pass, where no producer gave the
row sums (imported on first use: importing `coda` does not import Triton).

A program holds whole rows (as the backward's, coda.nn.layer_norm_grad, in its configuration), so
a row's shifted sums are complete where its output is formed: x is read once, where the maps read
it twice (LN_STATS for the sums, with a finishing kernel, then LAYER_NORM):

    d = x - c (c = x[:, 0]),  s = Σ d,  ss = Σ d²,  mean = c + s / n,  rstd = rsqrt(ss / n - (s / n)² + eps)
    y = (x - mean) rstd ⊙ g + β

s and ss (float32) are returned for the backward, which recomputes mean and rstd from them as
LN_ROW does (coda.ops.norms). So a block need not sum its output for the norm that follows in its
GEMM's epilogue (out_proj_residual's stats="layer") unless the norm folds into a GEMM.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..codegen.kernel import launch_cached
from .layer_norm_grad import config, unit_columns


@triton.jit
def layer_norm_forward(X, Y, G, BETA, S, SS, M, N, stride_x, stride_y, inv_n, eps,
                       ROWS: tl.constexpr, BLOCK_N: tl.constexpr, STAGES: tl.constexpr):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    col_in = cols < N
    g = tl.load(G + cols, mask=col_in, other=0.0).to(tl.float32)
    beta = tl.load(BETA + cols, mask=col_in, other=0.0).to(tl.float32)
    for block in tl.range(pid, tl.cdiv(M, ROWS), tl.num_programs(0), num_stages=STAGES):
        rows = block * ROWS + tl.arange(0, ROWS)
        row_in = rows < M
        inside = row_in[:, None] & col_in[None, :]
        x = tl.load(X + rows[:, None] * stride_x + cols[None, :], mask=inside, other=0.0).to(tl.float32)
        shift = tl.load(X + rows * stride_x, mask=row_in, other=0.0).to(tl.float32)
        d = tl.where(inside, x - shift[:, None], 0.0)
        s = tl.sum(d, axis=1)
        ss = tl.sum(d * d, axis=1)
        m = s * inv_n
        rstd = tl.rsqrt(tl.maximum(ss * inv_n - m * m, 0.0) + eps)
        y = (d - m[:, None]) * rstd[:, None] * g[None, :] + beta[None, :]
        tl.store(Y + rows[:, None] * stride_y + cols[None, :], y.to(Y.dtype.element_ty), mask=inside)
        tl.store(S + rows, s, mask=row_in)
        tl.store(SS + rows, ss, mask=row_in)


def launch(x: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, eps: float
           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(y, s, ss) of LayerNorm over the rows of x [M, N]: y in x's dtype, and the row sums shifted
    by each row's first value, float32 [M]."""
    m, n = x.shape
    x = unit_columns(x)
    y = torch.empty((m, n), device=x.device, dtype=x.dtype)
    s, ss = (torch.empty(m, device=x.device, dtype=torch.float32) for _ in range(2))
    if m == 0:
        return y, s, ss
    rows, warps, programs, stages = config(m, n, x.device)
    launch_cached(layer_norm_forward, (programs,), [x, y, g, beta, s, ss, m, n, x.stride(0), y.stride(0),
                                                    1.0 / n, float(eps)],
                  dict(ROWS=rows, BLOCK_N=triton.next_power_of_2(n), STAGES=stages, num_warps=warps),
                  x.device)
    return y, s, ss
