"""GPU checks of coda.ops.linear, coda.ops.mlp and coda.ops.dropout: bf16 at real shapes.

For the output and every gradient: CODA's relative error against float64 (the unfused formula
run on the same bf16 inputs, upcast) must be at most twice the relative error of eager PyTorch
running the unfused formula in bf16, plus 1e-6. Dropout uses the contract's mask in all three.
`launch_count_cases()` gives the lead's profiler forward+backward closures to count kernels.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from accuracy import assert_within_eager

from coda.ops.dropout import dropout
from coda.ops.linear import linear, mlp
from coda.runtime.rng import dropout_mask

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

BF16 = torch.bfloat16
SEED = 1234


# the unfused formulas (eager PyTorch; the same code runs in bf16 and in float64) -------------------
def act(name: str | None, h: torch.Tensor) -> torch.Tensor:
    if name is None:
        return h
    return {"gelu": lambda: F.gelu(h, approximate="tanh"), "gelu_erf": lambda: F.gelu(h),
            "relu": lambda: F.relu(h), "silu": lambda: F.silu(h),
            "squared_relu": lambda: F.relu(h).square()}[name]()


def drop(y: torch.Tensor, p: float) -> torch.Tensor:
    if p == 0:
        return y
    keep = dropout_mask(SEED, p, y.shape[0], y.shape[1], y.device)
    return torch.where(keep, y / (1 - p), torch.zeros((), dtype=y.dtype, device=y.device))


def ref_linear(x, w, b, activation, p):
    return drop(act(activation, F.linear(x, w, b)), p)


def ref_mlp(x, w1, b1, w2, b2, activation, p, residual):
    y = drop(F.linear(act(activation, F.linear(x, w1, b1)), w2, b2), p)
    return y if residual is None else y + residual


# the criterion (tests/gpu/accuracy.py) -------------------------------------------------------------
def run(fn, inputs, g):
    """fn(*inputs) and the gradients of <output, g> w.r.t. every tensor input."""
    leaves = [None if t is None else t.detach().clone().requires_grad_() for t in inputs]
    y = fn(*leaves)
    grads = torch.autograd.grad(y, [t for t in leaves if t is not None], g.to(y.dtype))
    return [y, *grads]


def check(coda_fn, formula, inputs, names, out_features, label):
    g = torch.randn(inputs[0].shape[0], out_features, device="cuda", dtype=BF16)
    ours = run(coda_fn, inputs, g)
    eager = run(formula, inputs, g)
    ref = run(formula, [None if t is None else t.double() for t in inputs], g.double())
    for name, a, e, r in zip(["output", *names], ours, eager, ref, strict=True):
        assert a.dtype == e.dtype and a.shape == e.shape, name
        assert_within_eager(f"{label} {name}", a, e, r)


# cases ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("activation", "with_bias", "p", "tokens", "k", "n"), [
    ("gelu", True, 0.1, 4096, 768, 3072),
    (None, True, 0.0, 2048, 4096, 4096),
    ("squared_relu", False, 0.0, 4096, 2048, 2048),
])
def test_linear_bf16(activation, with_bias, p, tokens, k, n):
    torch.manual_seed(1)
    x = torch.randn(tokens, k, device="cuda").to(BF16)
    w = (torch.randn(n, k, device="cuda") / k**0.5).to(BF16)
    b = (torch.randn(n, device="cuda") * 0.1).to(BF16) if with_bias else None
    check(lambda x, w, b: linear(x, w, b, activation, p, seed=SEED),
          lambda x, w, b: ref_linear(x, w, b, activation, p), [x, w, b],
          ["dx", "dw", "db"][: 2 + with_bias], n, f"linear {activation} p={p} {tokens}x{k}->{n}")


@pytest.mark.parametrize(("activation", "p", "with_b2", "with_residual", "tokens", "hidden", "inner"), [
    ("gelu", 0.1, True, True, 4096, 768, 3072),
    ("silu", 0.0, False, False, 2048, 4096, 8192),
])
def test_mlp_bf16(activation, p, with_b2, with_residual, tokens, hidden, inner):
    torch.manual_seed(2)
    x = torch.randn(tokens, hidden, device="cuda").to(BF16)
    w1 = (torch.randn(inner, hidden, device="cuda") / hidden**0.5).to(BF16)
    b1 = (torch.randn(inner, device="cuda") * 0.1).to(BF16)
    w2 = (torch.randn(hidden, inner, device="cuda") / inner**0.5).to(BF16)
    b2 = (torch.randn(hidden, device="cuda") * 0.1).to(BF16) if with_b2 else None
    res = torch.randn(tokens, hidden, device="cuda").to(BF16) if with_residual else None
    names = ["dx", "dw1", "db1", "dw2"] + ["db2"] * with_b2 + ["dresidual"] * with_residual
    check(lambda *t: mlp(*t[:5], activation, p, SEED, t[5]),
          lambda *t: ref_mlp(*t[:5], activation, p, t[5]), [x, w1, b1, w2, b2, res], names,
          hidden, f"mlp {activation} p={p} {tokens}x{hidden}x{inner}")


def test_mlp_post_norm_bf16():
    """BERT's feed-forward: residual=x (x's two gradients summed in dx's epilogue), and the
    norm's row sums against float64 sums of the float64 reference output."""
    torch.manual_seed(4)
    tokens, hidden, inner = 4096, 768, 3072
    x = torch.randn(tokens, hidden, device="cuda").to(BF16)
    w1 = (torch.randn(inner, hidden, device="cuda") / hidden**0.5).to(BF16)
    b1 = (torch.randn(inner, device="cuda") * 0.1).to(BF16)
    w2 = (torch.randn(hidden, inner, device="cuda") / inner**0.5).to(BF16)
    b2 = (torch.randn(hidden, device="cuda") * 0.1).to(BF16)
    check(lambda *t: mlp(*t, "gelu_erf", 0.1, SEED, t[0], "layer")[0],
          lambda *t: ref_mlp(*t, "gelu_erf", 0.1, t[0]), [x, w1, b1, w2, b2],
          ["dx", "dw1", "db1", "dw2", "db2"], hidden, "mlp post-norm")
    _, ss, s = mlp(x, w1, b1, w2, b2, "gelu_erf", 0.1, SEED, x, "layer")
    y64 = ref_mlp(*(t.double() for t in (x, w1, b1, w2, b2)), "gelu_erf", 0.1, x.double())
    y_eager = ref_mlp(x, w1, b1, w2, b2, "gelu_erf", 0.1, x).float()
    for name, got, want, eager in (("ss", ss, (y64 * y64).sum(-1), (y_eager * y_eager).sum(-1)),
                                   ("s", s, y64.sum(-1), y_eager.sum(-1))):
        assert_within_eager(f"mlp post-norm {name}", got, eager, want)


def test_dropout_bf16():
    torch.manual_seed(3)
    x = torch.randn(4096, 2048, device="cuda").to(BF16)
    check(lambda x: dropout(x, 0.1, seed=SEED), lambda x: drop(x, 0.1), [x], ["dx"], 2048,
          "dropout 4096x2048")
    y = dropout(x, 0.1, seed=SEED)
    assert torch.equal(y != 0, dropout_mask(SEED, 0.1, 4096, 2048, x.device) & (x != 0))


# kernel counts (the lead's profiler) ---------------------------------------------------------------
def launch_count_cases():
    """(name, coda_fn, eager_fn): forward + backward once, bf16 on CUDA, hidden 2048, 4096 tokens."""
    torch.manual_seed(4)
    tokens, hidden, inner = 4096, 2048, 8192

    def param(*shape, scale=1.0):
        return (torch.randn(*shape, device="cuda") * scale).to(BF16).requires_grad_()

    x, res = param(tokens, hidden), param(tokens, hidden)
    w, b = param(hidden, hidden, scale=hidden**-0.5), param(hidden, scale=0.1)
    w1, b1 = param(inner, hidden, scale=hidden**-0.5), param(inner, scale=0.1)
    w2, b2 = param(hidden, inner, scale=inner**-0.5), param(hidden, scale=0.1)
    g_hidden = torch.randn(tokens, hidden, device="cuda", dtype=BF16)
    g_inner = torch.randn(tokens, inner, device="cuda", dtype=BF16)

    def fwd_bwd(fn, inputs, g):
        return lambda: torch.autograd.grad(fn(), inputs, g)

    return [
        ("linear_bias", fwd_bwd(lambda: linear(x, w, b), [x, w, b], g_hidden),
         fwd_bwd(lambda: F.linear(x, w, b), [x, w, b], g_hidden)),
        ("linear_bias_gelu_dropout",
         fwd_bwd(lambda: linear(x, w1, b1, "gelu", 0.1), [x, w1, b1], g_inner),
         fwd_bwd(lambda: F.dropout(F.gelu(F.linear(x, w1, b1), approximate="tanh"), 0.1),
                 [x, w1, b1], g_inner)),
        ("mlp_gelu_dropout_residual",
         fwd_bwd(lambda: mlp(x, w1, b1, w2, b2, "gelu", 0.1, residual=res), [x, w1, b1, w2, b2, res],
                 g_hidden),
         fwd_bwd(lambda: F.dropout(F.linear(F.gelu(F.linear(x, w1, b1), approximate="tanh"), w2, b2),
                                   0.1) + res, [x, w1, b1, w2, b2, res], g_hidden)),
        ("dropout", fwd_bwd(lambda: dropout(x, 0.1), [x], g_hidden),
         fwd_bwd(lambda: F.dropout(x, 0.1), [x], g_hidden)),
    ]
