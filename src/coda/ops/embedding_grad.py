"""The Triton kernel behind `coda.ops.embedding`'s backward (imported on first use: importing
`coda` does not import Triton).

dW[r] = Σ dy[t] over the tokens t whose id is r. The tokens come sorted by id (a stable sort:
within an id, in their order in the batch); the program at sorted position t (times a block of
columns) returns at once unless t is the first of its id's run, and otherwise sums the run's rows
of dy, TOKENS at a time in float32, and writes that one row of dW (the rest of dW is zero-filled
before; with ACCUMULATE, dW holds a tied output layer's gradient and the row is added to it).
Each row is written by exactly one program, in an order fixed by the sort: the result
does not depend on scheduling (no atomics), and a frequent id (a few percent of real text) takes
count / TOKENS steps. The grid is the batch's tokens, not the table's rows: a GPT-2 batch has
16384 tokens and its table 50257 rows, most of which no token has.
"""

import torch
import triton
import triton.language as tl

from ..codegen.kernel import one_at_a_time


@triton.jit
def embedding_grad(DY, ORDER, KEYS, ENDS, DW, H, stride_dy, stride_dw, PADDING_IDX,
                   TOKENS: tl.constexpr, BLOCK_H: tl.constexpr, HAS_PADDING: tl.constexpr,
                   ACCUMULATE: tl.constexpr, STAGES: tl.constexpr):
    t = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    in_cols = cols < H
    key = tl.load(KEYS + t)
    before = tl.load(KEYS + t - 1, mask=t > 0, other=-1)
    first = key != before
    if HAS_PADDING:   # the padding row's embedding is never trained: it stays zero
        first = first & (key != PADDING_IDX)
    if first:
        end = tl.load(ENDS + t)
        if ACCUMULATE:   # onto the gradient already there (a tied output layer's)
            total = tl.load(DW + key * stride_dw + cols, mask=in_cols, other=0.0).to(tl.float32)
        else:
            total = tl.zeros([BLOCK_H], dtype=tl.float32)
        for t0 in tl.range(t, end, TOKENS, num_stages=STAGES):
            run = t0 + tl.arange(0, TOKENS)
            token = tl.load(ORDER + run, mask=run < end, other=0)
            grads = tl.load(DY + token[:, None] * stride_dy + cols[None, :],
                            mask=(run < end)[:, None] & in_cols[None, :], other=0.0)
            total += tl.sum(grads.to(tl.float32), axis=0)
        tl.store(DW + key * stride_dw + cols, total.to(DW.dtype.element_ty), mask=in_cols)


def sorted_runs(ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(keys, order, ends): the ids sorted (stable, as int32: four radix passes, not eight), the
    tokens in that order, and for each sorted position one past the last token of its id."""
    keys, order = torch.sort(ids.to(torch.int32), stable=True)
    return keys, order, torch.searchsorted(keys, keys, right=True)


def launch(dy: torch.Tensor, ids: torch.Tensor, dw: torch.Tensor, padding_idx: int | None,
           accumulate: bool = False, block_h: int = 128, tokens: int = 16, warps: int = 1,
           stages: int = 1) -> None:
    """Write into a zero-filled dw [V, H] (add into any dw with `accumulate`) the gradient of the
    table from dy [N, H] (rows) and ids [N]."""
    kernel(dy, *sorted_runs(ids), dw, padding_idx, accumulate, block_h, tokens, warps, stages)


def kernel(dy: torch.Tensor, keys: torch.Tensor, order: torch.Tensor, ends: torch.Tensor,
           dw: torch.Tensor, padding_idx: int | None, accumulate: bool, block_h: int, tokens: int,
           warps: int, stages: int) -> None:
    """The kernel alone, on `sorted_runs(ids)`."""
    n, h = dy.shape
    block_h = min(block_h, triton.next_power_of_2(h))
    grid = (n, triton.cdiv(h, block_h))
    with one_at_a_time(dy.device):
        embedding_grad[grid](dy, order, keys, ends, dw, h, dy.stride(0), dw.stride(0),
                             -1 if padding_idx is None else padding_idx, TOKENS=tokens, BLOCK_H=block_h,
                             HAS_PADDING=padding_idx is not None, ACCUMULATE=accumulate, STAGES=stages,
                             num_warps=warps)
