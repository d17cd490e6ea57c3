"""coda.ops.embedding: torch's lookup forward, and the table's gradient from one sorted pass.

float32 runs the Triton kernel through the interpreter; float64 (and CPU tensors without the
interpreter) take PyTorch's own backward. The reference is float64 index_add in batch order.
"""

from __future__ import annotations

import pytest
import torch

import coda
from coda.ops import embedding
from coda.ops.embedding import table_grad
from coda.runtime.program import interpreter_enabled

F64 = torch.float64
needs_interpreter = pytest.mark.skipif(not interpreter_enabled(), reason="runs the Triton kernel on the CPU")


def batch(rows: int, seed: int) -> torch.Tensor:
    """ids [3, 21] in [0, rows): token 5 forty times (more than one 16-token step of the kernel),
    the padding id 2 a few times, most rows of the table never seen."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, rows, (3, 21), generator=g)
    ids.view(-1)[torch.randperm(63, generator=g)[:40]] = 5
    ids[1, :3] = 2
    return ids


def reference_grad(ids: torch.Tensor, dy: torch.Tensor, rows: int, padding_idx: int | None) -> torch.Tensor:
    dw = torch.zeros(rows, dy.shape[-1], dtype=F64).index_add_(0, ids.reshape(-1),
                                                                dy.reshape(-1, dy.shape[-1]).to(F64))
    if padding_idx is not None:
        dw[padding_idx] = 0
    return dw


@needs_interpreter
@pytest.mark.parametrize("padding_idx", [None, 2, -35])
def test_table_gradient_through_the_kernel(padding_idx):
    rows, h = 37, 40
    ids = batch(rows, 0)
    w = torch.randn(rows, h, requires_grad=True)
    y = embedding(ids, w, padding_idx)
    assert torch.equal(y, w.detach()[ids])
    dy = torch.randn(y.shape, generator=torch.Generator().manual_seed(1))
    y.backward(dy)
    want = reference_grad(ids, dy, rows, None if padding_idx is None else padding_idx % rows)
    # float32 sums of up to 40 terms: a few ulps of the terms' magnitudes
    torch.testing.assert_close(w.grad.to(F64), want, rtol=1e-5, atol=1e-5 * dy.abs().max().item())


@needs_interpreter
def test_kernel_adds_only_the_rows_of_ids_and_runs_agree():
    """The kernel writes the rows of the ids present (the rest of a NaN-filled dw stays NaN:
    zero-filling is the caller's), and two runs give the same bits (the sums' order is the
    sort's)."""
    from coda.ops import embedding_grad

    rows, ids = 37, batch(37, 2).reshape(-1)
    dy = torch.randn(ids.numel(), 24)
    dw = torch.full((rows, 24), float("nan"))
    embedding_grad.launch(dy, ids, dw, None)
    seen = torch.zeros(rows, dtype=torch.bool)
    seen[ids] = True
    assert dw[~seen].isnan().all() and not dw[seen].isnan().any()
    torch.testing.assert_close(dw[seen].to(F64), reference_grad(ids, dy, rows, None)[seen], rtol=1e-5,
                               atol=1e-5)
    assert torch.equal(table_grad(dy, ids, rows, None), table_grad(dy, ids, rows, None))


def test_float64_takes_torch_backward():
    rows = 37
    ids = batch(rows, 3)
    w = torch.randn(rows, 8, dtype=F64, requires_grad=True)
    dy = torch.randn(3, 21, 8, dtype=F64)
    embedding(ids, w, 2).backward(dy)
    torch.testing.assert_close(w.grad, reference_grad(ids, dy, rows, 2), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, F64])   # the kernel's path, torch's backward
@pytest.mark.parametrize(("tokens", "width"), [(4, 0), (0, 4)])   # no features, no tokens
def test_a_table_of_zero_width_or_no_tokens(dtype, tokens, width):
    """As torch's embedding: a [V, 0] table gives [..., 0] rows and a [V, 0] gradient (dy
    [..., 0] has no rows to infer with reshape(-1, 0)); no ids give a zero gradient."""
    ids = torch.tensor([1, 4, 0, 1])[:tokens].reshape(2, tokens // 2)
    w = torch.randn(5, width, dtype=dtype, requires_grad=True)
    want = w.detach().to(F64).requires_grad_()
    torch.nn.functional.embedding(ids, want).backward(torch.ones(2, tokens // 2, width, dtype=F64))
    y = embedding(ids, w)
    assert y.shape == (2, tokens // 2, width)
    y.backward(torch.ones_like(y))
    torch.testing.assert_close(w.grad, want.grad.to(dtype))


def test_without_grad_it_is_torch_embedding():
    w = torch.randn(10, 4)
    ids = torch.tensor([[1, 9], [0, 1]])
    with torch.no_grad():
        assert torch.equal(embedding(ids, w.requires_grad_()), torch.nn.functional.embedding(ids, w))


def test_bad_arguments_raise():
    w, ids = torch.randn(10, 4), torch.tensor([1, 2])
    cases = [(lambda: embedding(ids, w[0]), "w must be a floating-point tensor"),
             (lambda: embedding(ids, w.long()), "w must be a floating-point tensor"),
             (lambda: embedding(ids.float(), w), "ids must be an int32 or int64 tensor"),
             (lambda: embedding(ids, w, padding_idx=10), r"padding_idx must be in \[-10, 10\)"),
             (lambda: embedding(ids, w, padding_idx=1.5), "padding_idx must be an int or None, got 1.5"),
             (lambda: embedding(ids, w, padding_idx="0"), "padding_idx must be an int or None, got '0'"),
             (lambda: embedding(torch.tensor([3, 10]), w), r"ids must lie in \[0, 10\) .* from 3 to 10"),
             (lambda: embedding(torch.tensor([-1, 2]), w), r"ids must lie in \[0, 10\) .* from -1 to 2")]
    for fn, words in cases:
        with pytest.raises(coda.LaunchError, match=words):
            fn()


@pytest.mark.parametrize(("dtype", "padding_idx"), [
    pytest.param(torch.float32, None, marks=needs_interpreter),
    pytest.param(torch.float32, 2, marks=needs_interpreter),
    (F64, 2),   # the reference backend
])
def test_tied_table_gradient_joins_the_output_layers(dtype, padding_idx):
    """tied_embedding's table used as an output layer's weight (GPT-2's tied head): w's gradient
    is the lookup's plus the layer's, against float64 autograd of the untied formula; the
    layer's gradient arrives in the embedding's backward, which adds into a copy of it (a
    gradient from plain autograd may be shared)."""
    from coda.ops import tied_embedding

    rows, h = 37, 24
    ids, x = batch(rows, 4), torch.randn(10, h, generator=torch.Generator().manual_seed(5), dtype=dtype)
    w = torch.randn(rows, h, dtype=dtype, generator=torch.Generator().manual_seed(6), requires_grad=True)
    dy = torch.randn(3, 21, h, dtype=dtype, generator=torch.Generator().manual_seed(7))
    dz = torch.randn(10, rows, dtype=dtype, generator=torch.Generator().manual_seed(8))
    y, table = tied_embedding(ids, w, padding_idx)
    assert torch.equal(table, w.detach()) and table.requires_grad
    torch.autograd.backward([y, x @ table.T], [dy, dz])
    want = reference_grad(ids, dy, rows, padding_idx) + dz.T.to(F64) @ x.to(F64)
    torch.testing.assert_close(w.grad.to(F64), want, rtol=1e-5, atol=1e-5 * want.abs().max().item())


@needs_interpreter
def test_tied_table_gradient_shared_with_another_branch_is_left_alone():
    """`table + e` hands one gradient tensor to both branches: the table's backward adds into a
    copy, so e's gradient is what it would be without the embedding."""
    from coda.ops import tied_embedding

    w = torch.randn(10, 8, requires_grad=True)
    extra, c = torch.randn(10, 8, requires_grad=True), torch.randn(10, 8)
    ids = batch(10, 3)
    doubled = extra * 2   # made first, so autograd runs its backward after the table's
    y, table = tied_embedding(ids, w)
    ((y ** 2).sum() + ((table + doubled) * c).sum()).backward()
    torch.testing.assert_close(extra.grad, 2 * c, rtol=0, atol=0)
    want = reference_grad(ids, 2 * y.detach(), 10, None) + c.to(F64)
    torch.testing.assert_close(w.grad.to(F64), want, rtol=1e-5, atol=1e-5)


@needs_interpreter
def test_the_lm_heads_gradient_is_added_into_in_place(monkeypatch):
    """With in_place=True, a gradient that its producer made for this one use
    (linear_cross_entropy's, marked `sole_use`) is added into in place: no copy of a [V, H]
    table (GPT-2's tied LM head under coda.patch)."""
    import sys

    from coda.ops import linear_cross_entropy, tied_embedding

    module = sys.modules["coda.ops.embedding"]
    seen = []
    add = module.table_grad
    monkeypatch.setattr(module, "table_grad",
                        lambda *args, into=None, **kw: seen.append(into) or add(*args, into=into, **kw))
    w = torch.randn(10, 8, requires_grad=True)
    ids = batch(10, 2).reshape(-1)
    y, table = tied_embedding(ids, w, in_place=True)
    linear_cross_entropy(y * 1.0, table, ids.flip(0)).backward()
    assert len(seen) == 1 and getattr(seen[0], module.SOLE_USE, False)
    assert torch.equal(seen[0], w.grad)   # the lookup's gradient was added into it


@needs_interpreter
@pytest.mark.parametrize("observer", ["hook", "autograd.grad"])
def test_the_lm_heads_gradient_seen_by_the_caller_is_its_own(observer):
    """By default the head's gradient for the table is added into a copy: a hook on the table,
    or torch.autograd.grad asking for it, is handed the head's gradient alone, and keeps it
    (in place, the lookup's rows were added into what the caller held), against float64."""
    from coda.ops import linear_cross_entropy, tied_embedding

    v, h, t = 20, 16, 6
    gen = torch.Generator().manual_seed(3)
    w0, ids, target = torch.randn(v, h, generator=gen), *torch.randint(0, v, (2, t), generator=gen)
    head = w0.to(F64).requires_grad_()   # d loss / d table: the head's part alone
    torch.nn.functional.cross_entropy(w0.to(F64)[ids] @ head.T, target).backward()
    w = w0.clone().requires_grad_()
    y, table = tied_embedding(ids, w)
    loss = linear_cross_entropy(y, table, target)
    if observer == "hook":
        seen = []
        table.register_hook(seen.append)
        loss.backward()
        got = seen[0]
    else:
        got, _ = torch.autograd.grad(loss, (table, w))
    torch.testing.assert_close(got.to(F64), head.grad, rtol=1e-5, atol=1e-6)


@needs_interpreter
def test_tied_table_unused_or_without_gradient():
    """A table that feeds nothing leaves the lookup's gradient alone (autograd's zeros come in);
    without a gradient for w, the op is a lookup and the table is w."""
    from coda.ops import tied_embedding

    rows = 37
    ids = batch(rows, 9)
    w = torch.randn(rows, 16, requires_grad=True)
    dy = torch.randn(3, 21, 16)
    y, _ = tied_embedding(ids, w)
    y.backward(dy)
    torch.testing.assert_close(w.grad.to(F64), reference_grad(ids, dy, rows, None), rtol=1e-5, atol=1e-5)
    with torch.no_grad():
        y, table = tied_embedding(ids, w)
    assert table is w and torch.equal(y, w[ids])
    with pytest.raises(coda.LaunchError, match="ids must be"):
        tied_embedding(ids.float(), w)
