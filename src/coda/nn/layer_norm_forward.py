"""The Triton kernel behind `coda.nn.layer_norm`'s forward in one pass, where no producer gave the
row sums, and RMSNorm's (imported on first use: importing `coda` does not import Triton).

A program holds whole rows (as the backward's, coda.nn.layer_norm_grad), so a row's shifted sums
are complete where its output is formed: x is read once, where the maps read it twice (LN_STATS
for the sums, with a finishing kernel, then LAYER_NORM):

    d = x - c (c = x[:, 0]),  s = Σ d,  ss = Σ d²,  mean = c + s / n,  rstd = rsqrt(ss / n - (s / n)² + eps)
    y = (x - mean) rstd ⊙ g + β

s and ss (float32) are returned for the backward, which recomputes mean and rstd from them as
LN_ROW does (coda.ops.norms). RMSNorm (`RMS`) keeps ss = Σ x² alone (no shift: no mean cancels),
rstd = rsqrt(ss / n + eps), y = x rstd ⊙ g. Measured on the H200 at 16384 x 768 (benchmarks/results/session40,
calls 7 and 8): 16.4 µs against the maps' 23.7, but LAYER_NORM's map alone on sums a producer's
epilogue took costs 13.7, and those sums cost the producer less than the difference (GPT-2's out
projection + ln_2, forward and backward: 196.3 µs with them, 206.0 with this pass in the
backward's configuration): so the blocks keep their producers' sums, and this pass serves the
norms whose input no epilogue summed (BERT's MLM head transform, coda.nn.GPT's ln_f, GPT-2's
ln_f under torch.compile, where no sums are carried between blocks).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..codegen.kernel import launch_cached
from .layer_norm_grad import config, sm_count, unit_columns


@triton.jit
def layer_norm_forward(X, Y, G, BETA, S, SS, M, N, stride_x, stride_y, inv_n, eps,
                       ROWS: tl.constexpr, BLOCK_N: tl.constexpr, STAGES: tl.constexpr, RMS: tl.constexpr):
    """BETA and S are not touched for RMSNorm."""
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    col_in = cols < N
    g = tl.load(G + cols, mask=col_in, other=0.0).to(tl.float32)
    for block in tl.range(pid, tl.cdiv(M, ROWS), tl.num_programs(0), num_stages=STAGES):
        rows = block * ROWS + tl.arange(0, ROWS)
        row_in = rows < M
        inside = row_in[:, None] & col_in[None, :]
        x = tl.load(X + rows[:, None] * stride_x + cols[None, :], mask=inside, other=0.0).to(tl.float32)
        if RMS:
            ss = tl.sum(x * x, axis=1)
            y = x * tl.rsqrt(ss * inv_n + eps)[:, None] * g[None, :]
        else:
            shift = tl.load(X + rows * stride_x, mask=row_in, other=0.0).to(tl.float32)
            d = tl.where(inside, x - shift[:, None], 0.0)
            s = tl.sum(d, axis=1)
            ss = tl.sum(d * d, axis=1)
            m = s * inv_n
            rstd = tl.rsqrt(tl.maximum(ss * inv_n - m * m, 0.0) + eps)
            beta = tl.load(BETA + cols, mask=col_in, other=0.0).to(tl.float32)
            y = (d - m[:, None]) * rstd[:, None] * g[None, :] + beta[None, :]
            tl.store(S + rows, s, mask=row_in)
        tl.store(Y + rows[:, None] * stride_y + cols[None, :], y.to(Y.dtype.element_ty), mask=inside)
        tl.store(SS + rows, ss, mask=row_in)


def forward_config(m: int, n: int, device: torch.device) -> tuple[int, int, int, int]:
    """(ROWS, warps, programs, STAGES): up to 1024 values a row, four rows a step in two warps,
    eight programs per SM, no pipelining (the fastest of 96 configurations timed at 16384 x 768,
    16.4 µs, against 23.7 in the backward's: session40/call8); wider rows as the backward."""
    if n > 1024:
        return config(m, n, device)
    return 4, 2, min(triton.cdiv(m, 4), 8 * sm_count(device)), 1


def launch(x: torch.Tensor, g: torch.Tensor, beta: torch.Tensor | None, eps: float
           ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """(y, s, ss) of LayerNorm over the rows of x [M, N]: y in x's dtype, and the row sums shifted
    by each row's first value, float32 [M]; of RMSNorm where `beta` is None: s is then None and
    ss = Σ x²."""
    m, n = x.shape
    rms = beta is None
    x = unit_columns(x)
    g, beta = g.contiguous(), None if rms else beta.contiguous()   # the kernel reads them densely
    y = torch.empty((m, n), device=x.device, dtype=x.dtype)
    ss = torch.empty(m, device=x.device, dtype=torch.float32)
    s = None if rms else torch.empty_like(ss)
    if m == 0:
        return y, s, ss
    rows, warps, programs, stages = forward_config(m, n, x.device)
    launch_cached(layer_norm_forward, (programs,), [x, y, g, g if rms else beta, ss if rms else s, ss, m, n,
                                                    x.stride(0), y.stride(0), 1.0 / n, float(eps)],
                  dict(ROWS=rows, BLOCK_N=triton.next_power_of_2(n), STAGES=stages, RMS=rms, num_warps=warps),
                  x.device)
    return y, s, ss
