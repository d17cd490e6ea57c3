"""Finishing cross-tile reductions: the per-tile partials of a launch, combined in a fixed order.

Every tile of a launch writes its partial of each reduction output (codegen/epilogue.py): row
reductions into a [column tiles, M] buffer, column reductions into a [row tiles, N] buffer. The
partials are combined along the first axis in index order (deterministic, no atomics). Sums and
maxima are one torch reduction each; a log-sum-exp has two buffers (each partial's maximum m_p
and its sum s_p of e^(x - m_p)) and takes one kernel that merges them in a single pass,
instead of the ten or so kernels of the same math in torch ops.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

#: Partials x columns each program of the log-sum-exp merge loads per step.
TILE = 2048


def merge_tile(parts: int) -> tuple[int, int]:
    """(partials, columns) per step of the merge: up to 128 partials at a time, so that a row
    block of the cross-entropy (1571 partials of 2560 rows at GPT-2's vocabulary) takes 13
    steps over 160 programs, not 1571 steps in each of 10 (one step of 256 columns: measured
    on the H200, 0.68 ms a 1280-row block); a launch of few partials (a 768-wide layer's 24)
    takes wide column blocks instead."""
    block_p = min(128, triton.next_power_of_2(max(parts, 1)))
    return block_p, max(16, TILE // block_p)


def finish(reduction: str, bufs: tuple[torch.Tensor, ...], out: torch.Tensor) -> None:
    """Combine the partials `bufs` ([partials, n] each) of one reduction output into `out` [n]."""
    if reduction.endswith("_sum"):
        torch.sum(bufs[0], 0, out=out)
    elif reduction.endswith("_max"):
        torch.amax(bufs[0], 0, out=out)
    else:
        maxima, sums = bufs
        parts, n = maxima.shape
        block_p, block_n = merge_tile(parts)
        _logsumexp_merge[(triton.cdiv(n, block_n),)](maxima, sums, out, parts, n,
                                                     BLOCK_P=block_p, BLOCK_N=block_n)


@triton.jit
def _logsumexp_merge(max_ptr, sum_ptr, out_ptr, parts, n, BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr):
    """out[j] = log Σ_p s_p[j]·e^(m_p[j]) for one block of columns j: BLOCK_P partials at a time,
    in order, merged into a running maximum and sum (one read of each partial). A column whose
    partials are all -inf gives -inf, as torch.logsumexp does; a NaN propagates."""
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    top = tl.full([BLOCK_N], float("-inf"), tl.float32)
    total = tl.zeros([BLOCK_N], tl.float32)
    for p0 in range(0, parts, BLOCK_P):
        rows = p0 + tl.arange(0, BLOCK_P)
        inside = (rows < parts)[:, None] & (cols < n)[None, :]
        offsets = rows[:, None] * n + cols[None, :]
        m = tl.load(max_ptr + offsets, mask=inside, other=float("-inf"))
        s = tl.load(sum_ptr + offsets, mask=inside, other=0.0)
        new_top = tl.maximum(top, tl.max(m, axis=0), propagate_nan=tl.PropagateNan.ALL)
        finite = new_top != float("-inf")
        shift = tl.where(finite, new_top, 0.0)   # exp(-inf - -inf) would be NaN
        total = (total * tl.where(finite, tl.exp(top - shift), 0.0)
                 + tl.sum(s * tl.exp(m - shift[None, :]), axis=0))
        top = new_top
    tl.store(out_ptr + cols, tl.where(total == 0.0, float("-inf"), top + tl.log(total)), mask=cols < n)
