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

#: Columns per program of the log-sum-exp merge.
BLOCK = 256


def finish(reduction: str, bufs: tuple[torch.Tensor, ...], out: torch.Tensor) -> None:
    """Combine the partials `bufs` ([partials, n] each) of one reduction output into `out` [n]."""
    if reduction.endswith("_sum"):
        torch.sum(bufs[0], 0, out=out)
    elif reduction.endswith("_max"):
        torch.amax(bufs[0], 0, out=out)
    else:
        maxima, sums = bufs
        parts, n = maxima.shape
        _logsumexp_merge[(triton.cdiv(n, BLOCK),)](maxima, sums, out, parts, n, BLOCK=BLOCK)


@triton.jit
def _logsumexp_merge(max_ptr, sum_ptr, out_ptr, parts, n, BLOCK: tl.constexpr):
    """out[j] = log Σ_p s_p[j]·e^(m_p[j]) for one block of columns j, merging p = 0, 1, ... in
    order with a running maximum (one read of each partial). A column whose partials are all
    -inf gives -inf, as torch.logsumexp does; a NaN propagates."""
    cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n
    top = tl.full([BLOCK], float("-inf"), tl.float32)
    total = tl.zeros([BLOCK], tl.float32)
    for p in range(parts):
        m = tl.load(max_ptr + p * n + cols, mask=mask, other=float("-inf"))
        s = tl.load(sum_ptr + p * n + cols, mask=mask, other=0.0)
        new_top = tl.maximum(top, m, propagate_nan=tl.PropagateNan.ALL)
        finite = new_top != float("-inf")
        total = (total * tl.where(finite, tl.exp(top - new_top), 0.0)
                 + s * tl.where(finite, tl.exp(m - new_top), 0.0))
        top = new_top
    tl.store(out_ptr + cols, tl.where(total == 0.0, float("-inf"), top + tl.log(total)), mask=mask)
