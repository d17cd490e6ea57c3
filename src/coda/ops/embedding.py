"""Token embedding lookup whose backward writes the table's gradient in one deterministic pass.

    y  = w[ids]                               (torch's gather)
    dw = Σ_t dy[t] e_{ids[t]}                 per table row, zero where no token has its id

PyTorch's CUDA backward for a large batch sorts the ids (eight radix passes on int64), counts
segments and partial sums in several kernels and zero-fills the table first: about 0.33 ms of a
GPT-2 step (16384 tokens, a 50257 × 768 table, profiled on the H200). Here: a zero-filled dw, a
stable sort of the ids as int32 (four passes), `searchsorted` for where each id's run of tokens
ends, and one Triton kernel (`embedding_grad.py`) whose program at the first token of a run sums
the run's rows of dy in float32 and writes that row of dw. The sums' order is the sort's, so the
result is the same at every run. `tied_embedding` also hands out the table for the output layer
that shares it: that layer's gradient takes the zero-filled table's place, and the kernel adds
its rows into it (into a copy, unless the caller says nothing else reads that gradient).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..errors import LaunchError
from ..runtime.program import default_backend
from . import checks
from .common import as_rows, op_function


@op_function
class EmbeddingFunction(torch.autograd.Function):
    """w[ids], and with `tied` also the table itself (`tied_embedding`); backward: the table's
    gradient by `embedding_grad`, added into the gradient that reached the second output (in
    place with `in_place`, see `table_grad`)."""

    @staticmethod
    def forward(ctx, ids: torch.Tensor, w: torch.Tensor, padding_idx: int | None, tied: bool,
                in_place: bool):
        ctx.save_for_backward(ids)
        ctx.rows, ctx.padding_idx, ctx.in_place = w.shape[0], padding_idx, in_place
        y = F.embedding(ids, w, padding_idx)
        return (y, w.detach()) if tied else y

    @staticmethod
    def backward(ctx, dy: torch.Tensor, dw: torch.Tensor | None = None
                 ) -> tuple[None, torch.Tensor, None, None, None]:
        (ids,) = ctx.saved_tensors
        return None, table_grad(as_rows(dy)[0], ids.reshape(-1), ctx.rows,
                                ctx.padding_idx, into=dw, in_place=ctx.in_place), None, None, None


#: An attribute set on a gradient tensor that its producer made for this one use (`sole_use`):
#: the tied table's backward may then add into it in place, where its caller also vouches that
#: no one else reads it (`tied_embedding(in_place=True)`: a hook on the table, or
#: torch.autograd.grad asking for the table's gradient, is handed that same tensor). Any other
#: incoming gradient may also be what autograd hands to another branch (`table + e` gives both
#: the same tensor), which an in-place add would change under it.
SOLE_USE = "_coda_sole_use"


def sole_use(grad: torch.Tensor) -> torch.Tensor:
    """`grad`, marked as made by its producer for its one consumer (see SOLE_USE)."""
    setattr(grad, SOLE_USE, True)
    return grad


def table_grad(dy: torch.Tensor, ids: torch.Tensor, rows: int, padding_idx: int | None,
               into: torch.Tensor | None = None, in_place: bool = False) -> torch.Tensor:
    """[rows, H] gradient of the table from dy [N, H] and ids [N], plus `into` (the gradient of
    the layer that shares the table), added in place with `in_place` when it is a contiguous
    tensor of dy's dtype marked `sole_use` (else into a copy of it): the Triton kernel where
    CODA's programs run Triton (`default_backend`), PyTorch's own backward where they run the
    reference."""
    if default_backend(dy) == "reference":
        grad = torch.ops.aten.embedding_dense_backward(dy, ids, rows, -1 if padding_idx is None
                                                       else padding_idx, False)
        return grad if into is None else into + grad
    from . import embedding_grad

    if into is None:
        dw = torch.zeros(rows, dy.shape[1], device=dy.device, dtype=dy.dtype)
    else:
        in_place = (in_place and getattr(into, SOLE_USE, False) and into.is_contiguous()
                    and into.dtype == dy.dtype)
        dw = into if in_place else into.to(dy.dtype, copy=True, memory_format=torch.contiguous_format)
    if dw.numel() and ids.numel():
        embedding_grad.launch(dy.contiguous(), ids, dw, padding_idx, accumulate=into is not None)
    return dw


def embedding(ids: torch.Tensor, w: torch.Tensor, padding_idx: int | None = None) -> torch.Tensor:
    """`torch.nn.functional.embedding(ids, w, padding_idx)`, with the table's gradient formed by
    one sorted pass (see the module docstring). ids: integer tensor of any shape, values in
    [0, V); w: [V, H] floating point. Returns [*ids.shape, H]. Under torch.compile it is torch's
    embedding (Inductor's own kernels)."""
    return _embedding(ids, w, padding_idx, tied=False)


def tied_embedding(ids: torch.Tensor, w: torch.Tensor, padding_idx: int | None = None, *,
                   in_place: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(embedding(ids, w, padding_idx), table): `table` holds w's values; give it, in place of w,
    to the output layer that shares the table with this embedding (GPT-2's LM head). That
    layer's gradient for the table then arrives in this op's backward, whose kernel adds the
    tokens' rows into a copy of it: no zero-filled [V, H] table and no third kernel by autograd
    to add the two gradients. `in_place=True` also saves the copy where the layer's gradient
    was made for this one use (`linear_cross_entropy`'s, `sole_use`): it is then updated in
    place, so pass it only when nothing else reads the table's gradient (no hook on `table`, no
    torch.autograd.grad asking for it: those are handed that same tensor); `coda.patch`, whose
    table never leaves the model, does. Under torch.compile, or without a gradient for w,
    `table` is w itself."""
    return _embedding(ids, w, padding_idx, tied=True, in_place=in_place)


def _embedding(ids: torch.Tensor, w: torch.Tensor, padding_idx: int | None, tied: bool,
               in_place: bool = False):
    if not isinstance(w, torch.Tensor) or w.dim() != 2 or not w.is_floating_point():
        raise LaunchError(f"w must be a floating-point tensor [V, H], got {checks.describe(w)}")
    if not isinstance(ids, torch.Tensor) or ids.dtype not in (torch.int32, torch.int64):
        raise LaunchError(f"ids must be an int32 or int64 tensor, got {checks.describe(ids)}")
    checks.check_strided("w", w)
    checks.check_strided("ids", ids)
    if ids.device != w.device:
        raise LaunchError(f"ids are on {ids.device} but w is on {w.device}")
    if padding_idx is not None and not checks.integer(padding_idx):
        raise LaunchError(f"padding_idx must be an int or None, got {padding_idx!r}")
    if padding_idx is not None and not -w.shape[0] <= padding_idx < w.shape[0]:
        raise LaunchError(f"padding_idx must be in [-{w.shape[0]}, {w.shape[0]}), got {padding_idx}")
    padding_idx = None if padding_idx is None else int(padding_idx) % w.shape[0]
    from ..integrations import compile as custom  # here: that module imports this one
    # ids in range, where reading them costs no synchronization (not on a GPU, not in a graph)
    if not custom.routed() and ids.device.type == "cpu" and ids.numel() and not (
            0 <= int(ids.min()) <= int(ids.max()) < w.shape[0]):
        raise LaunchError(f"ids must lie in [0, {w.shape[0]}) (w's rows); got values from "
                          f"{int(ids.min())} to {int(ids.max())}")
    if custom.routed() or not (torch.is_grad_enabled() and w.requires_grad):
        y = F.embedding(ids, w, padding_idx)
        return (y, w) if tied else y
    return EmbeddingFunction.apply(ids, w, padding_idx, tied, in_place)
