"""The exponential path's per-row steps (ops/cross_entropy.py, `Blocks._exp_forward`) as two
Triton kernels a block, where PyTorch's operators launch about thirty small ones (a GPT-2 step
has two blocks; each small kernel costs its launch and the gap before the next, about 3 µs on
the H200). Imported on first use: importing `coda` does not import Triton.

    headroom  lse = c + log ΣE per row, and `redo`: the block's rows (its `limit` if it has one)
              when the lse of a row it computed (one below the limit, ignored or not) exceeds c
              by more than the headroom, else 0 (one program: the decision is the block's).
    patch     after the launches that `redo` bounds: lse and c (the general forward's lse for
              both when the block ran again), the target's element of E set to
              exp(t - c) - exp(lse - c) (none for a target outside [0, V)), and the row scale
              r = α·exp(c - lse), 0 on the rows that do not count (α = 0), NaN where α is
              (a target outside [0, V): ops/cross_entropy.py).

ops/cross_entropy.py has the same steps in PyTorch (`exp_headroom`, `exp_patch`), which run on the
reference backend and which the tests hold the kernels to.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..codegen.kernel import one_at_a_time

#: rows a program takes per step
BLOCK = 1024


@triton.jit
def headroom_kernel(REF, SE, LSE, REDO, LIMIT, rows, headroom,
                    HAS_LIMIT: tl.constexpr, BLOCK: tl.constexpr):
    computed_rows = tl.load(LIMIT) if HAS_LIMIT else rows
    over = tl.zeros([BLOCK], dtype=tl.int32)
    for r0 in range(0, rows, BLOCK):
        r = r0 + tl.arange(0, BLOCK)
        inside = r < rows
        c = tl.load(REF + r, mask=inside, other=0.0)
        lse = c + tl.log(tl.load(SE + r, mask=inside, other=1.0))
        tl.store(LSE + r, lse, mask=inside)
        over = over | ((lse - c > headroom) & (r < computed_rows)).to(tl.int32)
    tl.store(REDO, tl.max(over, axis=0) * computed_rows)


@triton.jit
def patch_kernel(REF, LSE, LSE_AGAIN, REDO, T, TARGET, ALPHA, E, SCALE, rows, vocab, stride_e,
                 BLOCK: tl.constexpr):
    r = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = r < rows
    again = tl.load(REDO) > 0
    lse_again = tl.load(LSE_AGAIN + r, mask=inside & again, other=0.0)
    lse = tl.where(again, lse_again, tl.load(LSE + r, mask=inside, other=0.0))
    c = tl.where(again, lse_again, tl.load(REF + r, mask=inside, other=0.0))
    target = tl.load(TARGET + r, mask=inside, other=-1.0)
    onehot = (target >= 0) & (target < vocab)
    patched = tl.exp(tl.load(T + r, mask=inside, other=0.0) - c) - tl.exp(lse - c)
    column = tl.where(onehot, target, 0.0).to(tl.int64)
    tl.store(E + r.to(tl.int64) * stride_e + column, patched.to(E.dtype.element_ty), mask=inside & onehot)
    tl.store(LSE + r, lse, mask=inside)
    alpha = tl.load(ALPHA + r, mask=inside, other=0.0)
    tl.store(SCALE + r, tl.where(alpha != 0, alpha * tl.exp(c - lse), 0.0), mask=inside)


def headroom(reference: torch.Tensor, se: torch.Tensor, limit: torch.Tensor | None, headroom: float
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """(lse, redo): lse [rows] float32 and redo [1] int32, the m_limit of the block's second
    forward (module docstring)."""
    lse = torch.empty_like(reference)
    redo = torch.empty(1, dtype=torch.int32, device=reference.device)
    with one_at_a_time(reference.device):
        headroom_kernel[(1,)](reference, se, lse, redo, redo if limit is None else limit,
                              reference.shape[0], headroom, HAS_LIMIT=limit is not None, BLOCK=BLOCK,
                              num_warps=8)
    return lse, redo


def patch(reference: torch.Tensor, lse: torch.Tensor, lse_again: torch.Tensor, redo: torch.Tensor,
          t: torch.Tensor, target: torch.Tensor, alpha: torch.Tensor, e: torch.Tensor
          ) -> tuple[torch.Tensor, torch.Tensor]:
    """(lse, scale) [rows] after the second forward, the target's elements of e [rows, V]
    patched in place (module docstring); `lse` is overwritten."""
    rows = reference.shape[0]
    scale = torch.empty_like(reference)
    with one_at_a_time(e.device):
        patch_kernel[(triton.cdiv(rows, BLOCK),)](reference, lse, lse_again, redo, t, target, alpha, e,
                                                  scale, rows, e.shape[1], e.stride(0), BLOCK=BLOCK,
                                                  num_warps=4)
    return lse, scale

