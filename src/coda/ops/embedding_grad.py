"""The Triton kernel behind `coda.ops.embedding`'s backward (imported on first use: importing
`coda` does not import Triton).

dW[r] = Σ dy[t] over the tokens t whose id is r, for every row r of the table. The tokens come
sorted by id (a stable sort: within a row, in their order in the batch), with `starts[r]` the
first of row r's tokens and `starts[r + 1]` one past its last; each program writes ROWS whole
rows of dW, zeros where a row has no token, so dW needs no zero-fill first. A row's tokens are
summed TOKENS at a time in float32, in an order fixed by the sort: the result does not depend on
scheduling (no atomics), and a frequent token (a few percent of real text) takes
count / TOKENS steps, not count.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def embedding_grad(DY, ORDER, STARTS, DW, V, H, stride_dy, stride_dw, PADDING_IDX,
                   ROWS: tl.constexpr, TOKENS: tl.constexpr, BLOCK_H: tl.constexpr,
                   HAS_PADDING: tl.constexpr):
    first_row = tl.program_id(0) * ROWS
    cols = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    in_cols = cols < H
    for i in tl.static_range(ROWS):
        row = first_row + i
        if row < V:
            begin = tl.load(STARTS + row)
            end = tl.load(STARTS + row + 1)
            total = tl.zeros([BLOCK_H], dtype=tl.float32)
            for t0 in range(begin, end, TOKENS):
                t = t0 + tl.arange(0, TOKENS)
                token = tl.load(ORDER + t, mask=t < end, other=0)
                grads = tl.load(DY + token[:, None] * stride_dy + cols[None, :],
                                mask=(t < end)[:, None] & in_cols[None, :], other=0.0)
                total += tl.sum(grads.to(tl.float32), axis=0)
            if HAS_PADDING:   # the padding row's embedding is never trained
                total = tl.where(row == PADDING_IDX, 0.0, total)
            tl.store(DW + row * stride_dw + cols, total.to(DW.dtype.element_ty), mask=in_cols)


def launch(dy: torch.Tensor, order: torch.Tensor, starts: torch.Tensor, dw: torch.Tensor,
           padding_idx: int | None) -> None:
    """dw [V, H] from dy [N, H] (rows), `order` (the tokens sorted by id) and `starts` [V + 1]."""
    v, h = dw.shape
    block_h = min(256, triton.next_power_of_2(h))
    rows = 4
    grid = (triton.cdiv(v, rows), triton.cdiv(h, block_h))
    embedding_grad[grid](dy, order, starts, dw, v, h, dy.stride(0), dw.stride(0),
                         -1 if padding_idx is None else padding_idx,
                         ROWS=rows, TOKENS=32, BLOCK_H=block_h, HAS_PADDING=padding_idx is not None,
                         num_warps=4)
