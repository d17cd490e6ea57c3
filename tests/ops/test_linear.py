"""coda.ops.linear, coda.ops.mlp and coda.ops.dropout against the plain formulas.

Three kinds of check:
- float64 on the reference backend: torch.autograd.gradcheck (the math of the backward), and the
  forward and every gradient against PyTorch autograd of the unfused formula written here;
- float32 through the Triton interpreter (the real kernels) at small odd shapes, against the same
  float64 formula;
- dropout: the mask is the contract's (a pure-Python Philox here), the backward reuses exactly the
  forward mask, and the reference backend and the interpreter draw identical masks.
"""

from __future__ import annotations

import importlib
import math

import pytest
import torch

import coda
from coda.ops.dropout import dropout
from coda.ops.linear import linear, mlp
from oracle import philox_uniform

linear_module = importlib.import_module("coda.ops.linear")  # the module: coda.ops.linear is the op

F64 = torch.float64
ACTIVATIONS = [None, "gelu", "gelu_erf", "relu", "silu", "squared_relu"]


# the unfused formulas, in plain torch ops ----------------------------------------------------------
def act(name: str | None, h: torch.Tensor) -> torch.Tensor:
    if name is None:
        return h
    if name == "gelu":
        return 0.5 * h * (1 + torch.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h**3)))
    if name == "gelu_erf":
        return 0.5 * h * (1 + torch.erf(h / math.sqrt(2)))
    if name == "silu":
        return h / (1 + torch.exp(-h))
    relu = torch.where(h > 0, h, torch.zeros_like(h))
    return relu if name == "relu" else relu * relu


def keep_mask(seed: int, p: float, m: int, n: int) -> torch.Tensor:
    """The contract's dropout mask over an [m, n] output (pure-Python Philox, tests/oracle.py)."""
    u = [[philox_uniform(seed, i, j) for j in range(n)] for i in range(m)]
    return torch.tensor(u, dtype=F64) >= p


def drop(y: torch.Tensor, p: float, seed: int) -> torch.Tensor:
    if p == 0:
        return y
    rows = y.reshape(-1, y.shape[-1])
    mask = keep_mask(seed, p, *rows.shape).to(y.device)
    return (rows * mask / (1 - p)).reshape(y.shape)


def ref_linear(x, w, b, activation, p, seed):
    h = x @ w.T + (0 if b is None else b)
    return drop(act(activation, h), p, seed)


def ref_mlp(x, w1, b1, w2, b2, activation, p, seed, residual):
    h = act(activation, x @ w1.T + (0 if b1 is None else b1))
    y = drop(h @ w2.T + (0 if b2 is None else b2), p, seed)
    return y if residual is None else y + residual


# helpers ------------------------------------------------------------------------------------------
def make(*shapes, dtype=F64, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return [None if s is None else (torch.randn(*s, generator=g, dtype=F64) * scale).to(dtype)
            .requires_grad_() for s in shapes]


def forward_backward(fn, inputs, upstream_seed=1):
    """fn's output and the gradients of <output, upstream> w.r.t. every tensor input."""
    y = fn(*inputs)
    g = torch.randn(y.shape, generator=torch.Generator().manual_seed(upstream_seed), dtype=F64)
    tensors = [t for t in inputs if t is not None]
    grads = torch.autograd.grad(y, tensors, g.to(y.dtype))
    return y, grads


def assert_matches(got, want, rtol, atol_scale):
    y, grads = got
    y_ref, grads_ref = want
    for a, b in zip((y, *grads), (y_ref, *grads_ref), strict=True):
        assert a.shape == b.shape
        scale = b.abs().max().item()
        torch.testing.assert_close(a.to(F64), b.detach(), rtol=rtol, atol=atol_scale * max(scale, 1.0))


def upcast(tensors):
    return [None if t is None else t.detach().to(F64).requires_grad_() for t in tensors]


# float64, reference backend -----------------------------------------------------------------------
@pytest.mark.parametrize("p", [0.0, 0.3])
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_linear_float64(activation, p):
    x, w, b = make((2, 3, 5), (4, 5), (4,), seed=1)
    fn = lambda x, w, b: linear(x, w, b, activation, p, seed=11)  # noqa: E731
    assert torch.autograd.gradcheck(fn, (x, w, b))
    ref = lambda x, w, b: ref_linear(x, w, b, activation, p, 11)  # noqa: E731
    assert_matches(forward_backward(fn, (x, w, b)), forward_backward(ref, (x, w, b)), 1e-10, 1e-12)


def test_linear_float64_without_bias():
    x, w = make((6, 5), (7, 5), seed=2)
    fn = lambda x, w: linear(x, w, None, "silu", 0.2, seed=3)  # noqa: E731
    assert torch.autograd.gradcheck(fn, (x, w))
    ref = lambda x, w: ref_linear(x, w, None, "silu", 0.2, 3)  # noqa: E731
    assert_matches(forward_backward(fn, (x, w)), forward_backward(ref, (x, w)), 1e-10, 1e-12)


MLP_CASES = [  # activation, dropout p, with b2, with residual
    ("gelu", 0.3, True, True),
    ("gelu_erf", 0.0, True, False),
    ("relu", 0.2, False, True),
    ("silu", 0.0, False, False),
    ("squared_relu", 0.4, True, False),
    (None, 0.0, True, True),
]


@pytest.mark.parametrize(("activation", "p", "with_b2", "with_residual"), MLP_CASES)
def test_mlp_float64(activation, p, with_b2, with_residual):
    x, w1, b1, w2, b2, res = make((2, 3, 5), (6, 5), (6,), (4, 6), (4,) if with_b2 else None,
                                  (2, 3, 4) if with_residual else None, seed=3)
    fn = lambda x, w1, b1, w2, b2, res: mlp(x, w1, b1, w2, b2, activation, p, 5, res)  # noqa: E731
    inputs = (x, w1, b1, w2, b2, res)
    assert torch.autograd.gradcheck(fn, inputs)
    ref = lambda x, w1, b1, w2, b2, res: ref_mlp(x, w1, b1, w2, b2, activation, p, 5, res)  # noqa: E731
    assert_matches(forward_backward(fn, inputs), forward_backward(ref, inputs), 1e-10, 1e-12)


@pytest.mark.parametrize("stats", [None, "rms", "layer"])
def test_mlp_post_norm_float64(stats):
    """residual=x (a post-norm block, y = x + MLP(x)): x's two gradients summed in one epilogue;
    stats: the row sums of y for the next norm, not differentiated."""
    x, w1, b1, w2, b2 = make((2, 3, 5), (6, 5), (6,), (5, 6), (5,), seed=8)
    fn = lambda x, w1, b1, w2, b2: mlp(x, w1, b1, w2, b2, "gelu_erf", 0.3, 5, x, stats)  # noqa: E731
    y_only = lambda *t: fn(*t)[0] if stats else fn(*t)  # noqa: E731
    assert torch.autograd.gradcheck(y_only, (x, w1, b1, w2, b2))
    ref = lambda x, w1, b1, w2, b2: ref_mlp(x, w1, b1, w2, b2, "gelu_erf", 0.3, 5, x)  # noqa: E731
    assert_matches(forward_backward(y_only, (x, w1, b1, w2, b2)),
                   forward_backward(ref, (x, w1, b1, w2, b2)), 1e-10, 1e-12)
    if stats:
        y, *sums = fn(x, w1, b1, w2, b2)
        want = [(y * y).sum(-1), y.sum(-1)][:len(sums)]
        for got, expected in zip(sums, want, strict=True):
            assert not got.requires_grad
            torch.testing.assert_close(got, expected.detach(), rtol=1e-12, atol=1e-12)


def test_dropout_float64():
    (x,) = make((3, 4, 9), seed=4)
    fn = lambda x: dropout(x, 0.3, seed=9)  # noqa: E731
    assert torch.autograd.gradcheck(fn, (x,))
    assert_matches(forward_backward(fn, (x,)), forward_backward(lambda x: drop(x, 0.3, 9), (x,)),
                   1e-12, 1e-14)


# float32 through the Triton interpreter -----------------------------------------------------------
# The kernels accumulate in float32 over K <= 96 terms and evaluate the epilogue in float32, so
# results carry errors of a few float32 ulps times sqrt(K) of the values' scale (~1e-6 relative);
# 2e-5 (relative and of the largest magnitude) leaves room for the interpreter's exp/tanh/erf.
TOL32 = 2e-5


@pytest.mark.parametrize(("activation", "p", "with_bias"), [
    (None, 0.0, True), (None, 0.25, False), ("gelu", 0.25, True), ("gelu_erf", 0.0, True),
    ("relu", 0.25, True), ("silu", 0.25, False), ("squared_relu", 0.0, True)])
def test_linear_interpreter(activation, p, with_bias):
    x, w, b = make((3, 13, 40), (37, 40), (37,) if with_bias else None, dtype=torch.float32, seed=5,
                   scale=0.5)
    got = forward_backward(lambda x, w, b: linear(x, w, b, activation, p, seed=21), (x, w, b))
    want = forward_backward(lambda x, w, b: ref_linear(x, w, b, activation, p, 21), upcast((x, w, b)))
    assert_matches(got, want, TOL32, TOL32)


@pytest.mark.parametrize(("activation", "p", "with_b2", "with_residual"), [
    ("gelu", 0.25, True, True), ("squared_relu", 0.0, False, False), (None, 0.25, False, True)])
def test_mlp_interpreter(activation, p, with_b2, with_residual):
    x, w1, b1, w2, b2, res = make((45, 24), (66, 24), (66,), (19, 66), (19,) if with_b2 else None,
                                  (45, 19) if with_residual else None, dtype=torch.float32, seed=6,
                                  scale=0.5)
    inputs = (x, w1, b1, w2, b2, res)
    got = forward_backward(lambda *t: mlp(*t[:5], activation, p, 8, t[5]), inputs)
    want = forward_backward(lambda *t: ref_mlp(*t[:5], activation, p, 8, t[5]), upcast(inputs))
    assert_matches(got, want, TOL32, TOL32)


def test_mlp_post_norm_interpreter():
    """residual=x with stats="layer" through the real kernels: dx = dpre @ w1 + dy in one GEMM."""
    x, w1, b1, w2, b2 = make((3, 15, 24), (66, 24), (66,), (24, 66), (24,), dtype=torch.float32,
                             seed=9, scale=0.5)
    inputs = (x, w1, b1, w2, b2)
    _, ss, s = mlp(*inputs, "gelu_erf", 0.25, 8, x, "layer")
    got = forward_backward(lambda *t: mlp(*t, "gelu_erf", 0.25, 8, t[0], "layer")[0], inputs)
    want = forward_backward(lambda *t: ref_mlp(*t, "gelu_erf", 0.25, 8, t[0]), upcast(inputs))
    assert_matches(got, want, TOL32, TOL32)
    y64 = want[0].detach()
    # float32 sums of 24 terms: errors of a few ulps of the sum of the terms' magnitudes
    squares, magnitudes = (y64 * y64).sum(-1), y64.abs().sum(-1)
    torch.testing.assert_close(ss.double(), squares, rtol=TOL32, atol=TOL32 * squares.max().item())
    torch.testing.assert_close(s.double(), y64.sum(-1), rtol=TOL32, atol=TOL32 * magnitudes.max().item())


def test_linear_interpreter_expanded_upstream_gradient():
    """`y.sum().backward()` hands the op a stride-0 gradient; the kernels take any strides."""
    x, w, b = make((17, 33), (48, 33), (48,), dtype=torch.float32, seed=7, scale=0.5)
    linear(x, w, b, None).sum().backward()
    x64, w64, b64 = upcast((x, w, b))
    ref_linear(x64, w64, b64, None, 0.0, 0).sum().backward()
    for got, want in ((x.grad, x64.grad), (w.grad, w64.grad), (b.grad, b64.grad)):
        torch.testing.assert_close(got.to(F64), want, rtol=TOL32, atol=TOL32 * want.abs().max().item())


# dropout masks ------------------------------------------------------------------------------------
def test_backward_reuses_the_forward_mask_on_both_backends():
    """The interpreter (float32) and the reference (float64) drop the same elements, forward and
    backward (the backward programs regenerate the mask from the seed). The gradients' values
    against the contract's mask are checked by the float64 and interpreter tests above."""
    zeros = {}
    for dtype in (torch.float32, F64):
        x, w = make((29, 16), (52, 16), dtype=dtype, seed=8)
        y = linear(x, w, None, None, 0.5, seed=1234)
        x2 = make((29, 52), dtype=dtype, seed=9)[0]
        d = dropout(x2, 0.5, seed=1234)
        (dx2,) = torch.autograd.grad(d, [x2], torch.ones_like(d))
        assert torch.equal(d == 0, dx2 == 0)  # the backward's mask is the forward's
        assert torch.equal(y == 0, d == 0)     # same seed, same [rows, cols]: the same mask
        zeros[dtype] = y == 0
    assert torch.equal(zeros[torch.float32], zeros[F64])
    assert torch.equal(zeros[F64], ~keep_mask(1234, 0.5, 29, 52))
    assert 0.4 < zeros[F64].double().mean().item() < 0.6


def test_drawn_seed_is_saved_for_backward():
    """Without seed=, a seed is drawn from torch's CPU generator and the backward uses it."""
    x, w = make((10, 8), (12, 8), seed=10)
    torch.manual_seed(0)
    y = linear(x, w, None, None, 0.5)
    torch.manual_seed(0)
    assert torch.equal(y, linear(x, w, None, None, 0.5))
    assert not torch.equal(y, linear(x, w, None, None, 0.5))  # the generator moved on
    kept = (y != 0).to(F64)
    g = torch.randn(y.shape, generator=torch.Generator().manual_seed(1), dtype=F64)
    dx, dw = torch.autograd.grad(y, [x, w], g)
    torch.testing.assert_close(dx, (g * kept / 0.5) @ w.detach(), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(dw, (g * kept / 0.5).T @ x.detach(), rtol=1e-12, atol=1e-12)


def test_dropout_edge_probabilities():
    (x,) = make((5, 6), seed=11)
    assert dropout(x, 0.0) is x
    assert torch.equal(dropout(x, 1.0, seed=3), torch.zeros_like(x))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16])  # reference, interpreter
def test_dropout_of_nan_and_inf_is_nan_as_in_torch(dtype):
    """A dropped NaN or inf gives NaN (x * 0), as torch's dropout does, forward and backward."""
    x = torch.tensor([math.nan, math.inf, -math.inf, -1.0] * 8, dtype=dtype).repeat(16, 1)
    keep = keep_mask(5, 0.5, 16, 32)
    for p, scale in ((0.5, 2.0), (1.0, 0.0)):
        expected = x * torch.where(keep | (p == 1.0), scale, 0.0).to(dtype)
        torch.testing.assert_close(dropout(x, p, seed=5), expected, equal_nan=True, rtol=0, atol=0)
        x1 = x.clone().requires_grad_()
        (dx,) = torch.autograd.grad(dropout(x1, p, seed=5), x1, x)
        torch.testing.assert_close(dx, expected, equal_nan=True, rtol=0, atol=0)


def test_no_grad_forward_saves_no_preactivation(monkeypatch):
    calls = []
    real = linear_module.forward_program
    monkeypatch.setattr(linear_module, "forward_program", lambda *a: calls.append(a) or real(*a))
    x, w, b = make((4, 8), (6, 8), (6,), seed=12)
    with torch.no_grad():
        y = linear(x, w, b, "gelu")
    linear(x, w, b, "gelu")
    assert calls == [("gelu", True, False, False, False), ("gelu", True, False, False, True)]
    torch.testing.assert_close(y, ref_linear(x, w, b, "gelu", 0.0, 0).detach(), rtol=1e-12, atol=1e-12)


# errors -------------------------------------------------------------------------------------------
def test_errors_name_the_argument():
    x, w, b = (t.detach() for t in make((4, 8), (6, 8), (6,), seed=13))
    w1, w2 = torch.randn(10, 8, dtype=F64), torch.randn(6, 10, dtype=F64)
    cases = [
        (lambda: linear(x, w, b, "gelu_tanh"), "activation"),
        (lambda: linear(x, w[:, :5], b), "w is .* but x's last dimension is"),
        (lambda: linear(x, w[0], b), "w must be a 2-D"),
        (lambda: linear(x, w.float(), b), "w is torch.float32 on cpu but x is torch.float64"),
        (lambda: linear(x.long(), w, b), "x has dtype"),
        (lambda: linear(x[0, 0], w, b), "x must be a tensor"),
        (lambda: linear(x, w, b[:5]), "bias must be"),
        (lambda: linear(x, w, b, dropout_p=1.5), "dropout_p"),
        (lambda: linear(x, w, b, dropout_p=0.1, seed=1.5), "seed"),
        (lambda: mlp(x, w1, None, w2.T), "w2 is .* but w1's out_features is"),
        (lambda: mlp(x, w1, torch.zeros(6, dtype=F64), w2), "b1 must be"),
        (lambda: mlp(x, w1, None, w2, torch.zeros(8, dtype=F64)), "b2 must be"),
        (lambda: mlp(x, w1, None, w2, residual=torch.zeros(4, 5, dtype=F64)), "residual must be"),
        (lambda: mlp(x, w1, None, w2, stats="layernorm"), "stats must be one of"),
        (lambda: dropout(x, -0.1), "p must be"),
        (lambda: dropout(x.long(), 0.1), "x has dtype"),
        (lambda: dropout(x[0, 0], 0.1), "x must be a tensor with at least one dimension, got"),
        (lambda: dropout([1.0, 2.0], 0.1), "x must be a tensor .*got list"),
    ]
    for fn, words in cases:
        with pytest.raises(coda.LaunchError, match=words):
            fn()


def test_mlp_gradient_of_the_residual_alone():
    x, w1, w2 = (t.detach() for t in make((5, 4), (8, 4), (3, 8), seed=14))
    (res,) = make((5, 3), seed=15)
    y = mlp(x, w1, None, w2, activation="relu", dropout_p=0.5, seed=2, residual=res)
    g = torch.randn(5, 3, dtype=F64)
    (dres,) = torch.autograd.grad(y, [res], g)
    assert torch.equal(dres, g)


def zero_fills(step) -> int:
    """aten::zeros / zeros_like / zero_ calls while `step()` runs (the autograd engine makes
    zero tensors for an output whose gradient is undefined unless the Function opts out)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        step()
    return sum(e.name in ("aten::zeros", "aten::zeros_like", "aten::zero_") for e in prof.events())


def test_mlp_row_sums_get_no_zero_gradients():
    """The row sums are statistics: their gradients are never materialized as zero tensors, and
    the backward still gives the right gradients."""
    x, w1, w2 = make((4, 6, 8), (12, 8), (8, 12), seed=16)
    y, _, _ = mlp(x, w1, None, w2, None, "gelu", residual=x, stats="layer")
    assert zero_fills(lambda: y.sum().backward()) == 0
    xr, w1r, w2r = (t.detach().requires_grad_() for t in (x, w1, w2))
    ref_mlp(xr, w1r, None, w2r, None, "gelu", 0.0, 0, xr).sum().backward()
    for got, want in ((x.grad, xr.grad), (w1.grad, w1r.grad), (w2.grad, w2r.grad)):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
