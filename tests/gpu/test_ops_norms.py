"""GPU checks of coda.ops.rms_norm_linear, layer_norm_linear, out_proj_residual, coda.nn.layer_norm
and rms_norm: bf16, real shapes.

For the output and every gradient: CODA's relative error against float64 (the unfused formula run
on the same bf16 inputs, upcast) must be at most twice the relative error of eager PyTorch running
the unfused formula in bf16 (torch's rms_norm / layer_norm, then the linear), plus 1e-6. One case
has LayerNorm inputs with mean 100 and std 1 (the statistics' cancellation case).
`launch_count_cases()` gives the lead's profiler forward+backward closures to count kernels.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from accuracy import assert_within_eager

from coda.nn import layer_norm, rms_norm
from coda.ops.norms import layer_norm_linear, out_proj_residual, rms_norm_linear
from coda.runtime.rng import dropout_mask

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

BF16 = torch.bfloat16
SEED = 1234
EPS_RMS, EPS_LN = 1e-6, 1e-5


# the unfused formulas (eager PyTorch; the same code runs in bf16 and in float64) -------------------
def ref_rms(x, g, w, b=None):
    return F.linear(F.rms_norm(x, (x.shape[-1],), g, EPS_RMS), w, b)


def ref_ln(x, g, beta, w, b=None):
    return F.linear(F.layer_norm(x, (x.shape[-1],), g, beta, EPS_LN), w, b)


def ref_out_proj(x, w, residual, b, p):
    h = F.linear(x, w, b)
    if p > 0:
        keep = dropout_mask(SEED, p, h.shape[0], h.shape[1], h.device)
        h = torch.where(keep, h / (1 - p), torch.zeros((), dtype=h.dtype, device=h.device))
    return residual + h


def ref_rms_block(x, w1, residual, b1, g, w2, p):
    return ref_rms(ref_out_proj(x, w1, residual, b1, p), g, w2)


def ref_ln_block(x, w1, residual, b1, g, beta, w2, p):
    return ref_ln(ref_out_proj(x, w1, residual, b1, p), g, beta, w2)


def rms_block(x, w1, residual, b1, g, w2, p):
    y, ss = out_proj_residual(x, w1, residual, b1, p, seed=SEED, stats="rms")
    return rms_norm_linear(y, g, w2, EPS_RMS, sumsq=ss)


def ln_block(x, w1, residual, b1, g, beta, w2, p):
    y, ss, s = out_proj_residual(x, w1, residual, b1, p, seed=SEED, stats="layer")
    return layer_norm_linear(y, g, beta, w2, eps=EPS_LN, rowsum=s, sumsq=ss)


# the criterion -------------------------------------------------------------------------------------
def run(fn, inputs, g):
    """fn(*inputs) and the gradients of <output, g> w.r.t. every tensor input."""
    leaves = [t.detach().clone().requires_grad_() for t in inputs]
    y = fn(*leaves)
    return [y, *torch.autograd.grad(y, leaves, g.to(y.dtype))]


def check(coda_fn, formula, inputs, names, label):
    """Output and gradients w.r.t. `inputs` (named `names`) within twice eager's error."""
    with torch.no_grad():
        g = torch.randn(formula(*inputs).shape, device="cuda", dtype=BF16)
    ours = run(coda_fn, inputs, g)
    eager = run(formula, inputs, g)
    ref = run(formula, [t.double() for t in inputs], g.double())
    for name, a, e, r in zip(["output", *names], ours, eager, ref, strict=True):
        assert a.dtype == e.dtype and a.shape == e.shape, name
        assert_within_eager(f"{label} {name}", a, e, r)


def param(*shape, scale=1.0, shift=0.0):
    return (torch.randn(*shape, device="cuda") * scale + shift).to(BF16)


# cases ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("tokens", "k", "n", "with_bias"),
                         [(4096, 2048, 6144, False), (2048, 4096, 4096, True)])
def test_rms_norm_linear_bf16(tokens, k, n, with_bias):
    torch.manual_seed(1)
    inputs = [param(tokens, k), param(k, scale=0.2, shift=1.0), param(n, k, scale=k**-0.5)]
    inputs += [param(n, scale=0.1)] * with_bias
    names = ["dx", "dg", "dw"] + ["db"] * with_bias
    check(lambda *t: rms_norm_linear(t[0], t[1], t[2], EPS_RMS, *t[3:]), ref_rms, inputs, names,
          f"rms_norm_linear {tokens}x{k}->{n}")


@pytest.mark.parametrize(("tokens", "k", "n", "mean"), [(4096, 768, 3072, 0.0), (2048, 2048, 2048, 100.0)])
def test_layer_norm_linear_bf16(tokens, k, n, mean):
    torch.manual_seed(2)
    inputs = [param(tokens, k, shift=mean), param(k, scale=0.2, shift=1.0), param(k, scale=0.1),
              param(n, k, scale=k**-0.5), param(n, scale=0.1)]
    check(lambda *t: layer_norm_linear(*t, eps=EPS_LN), ref_ln, inputs, ["dx", "dg", "dbeta", "dw", "db"],
          f"layer_norm_linear {tokens}x{k}->{n} mean={mean}")


@pytest.mark.parametrize(("tokens", "n", "sums", "mean"),
                         [(16384, 768, True, 0.0), (4099, 1024, False, 30.0), (1000, 4096, True, 0.0)])
def test_layer_norm_bf16(tokens, n, sums, mean):
    """coda.nn.layer_norm, with the row sums given as out_proj_residual would give them (BERT's,
    GPT-2's ln_2) or computed (shifted), and with x passed through (the residual's gradient
    joined to dx)."""
    torch.manual_seed(4)
    inputs = [param(tokens, n, shift=mean), param(n, scale=0.2, shift=1.0), param(n, scale=0.1)]

    def coda_ln(x, g, beta):
        xd = x.detach().float()
        given = dict(rowsum=xd.sum(-1), sumsq=(xd * xd).sum(-1)) if sums else {}
        y, x_out = layer_norm(x, g, beta, EPS_LN, passthrough=True, **given)
        return y + 0.5 * x_out

    check(coda_ln, lambda x, g, beta: F.layer_norm(x, (n,), g, beta, EPS_LN) + 0.5 * x, inputs,
          ["dx", "dg", "dbeta"], f"layer_norm {tokens}x{n} sums={sums} mean={mean}")


@pytest.mark.parametrize(("tokens", "n", "sums"),
                         [(16384, 2048, False), (4099, 4096, True), (1000, 6144, False)])
def test_rms_norm_bf16(tokens, n, sums):
    """coda.nn.rms_norm: one pass over whole rows up to 4096 values (without given sums, forward
    and backward), the maps for wider rows, and x passed through."""
    torch.manual_seed(5)
    inputs = [param(tokens, n), param(n, scale=0.2, shift=1.0)]

    def coda_rms(x, g):
        xd = x.detach().float()
        y, x_out = rms_norm(x, g, EPS_RMS, sumsq=(xd * xd).sum(-1) if sums else None, passthrough=True)
        return y + 0.5 * x_out

    check(coda_rms, lambda x, g: F.rms_norm(x, (n,), g, EPS_RMS) + 0.5 * x, inputs, ["dx", "dg"],
          f"rms_norm {tokens}x{n} sums={sums}")


@pytest.mark.parametrize(("norm", "tokens", "hidden", "n"),
                         [("rms", 2048, 4096, 4096), ("layer", 4096, 768, 3072)])
def test_out_proj_into_norm_linear_bf16(norm, tokens, hidden, n):
    """The fused block: out projection + bias + dropout + residual emitting the statistics, then
    the norm-folded linear reading them (every gradient through the whole block)."""
    torch.manual_seed(3)
    p = 0.1
    inputs = [param(tokens, hidden), param(hidden, hidden, scale=hidden**-0.5), param(tokens, hidden),
              param(hidden, scale=0.1), param(hidden, scale=0.2, shift=1.0)]
    names = ["dx", "dw1", "dresidual", "db1", "dg"]
    if norm == "layer":
        inputs.append(param(hidden, scale=0.1))
        names.append("dbeta")
    inputs.append(param(n, hidden, scale=hidden**-0.5))
    names.append("dw2")
    coda_fn, formula = (rms_block, ref_rms_block) if norm == "rms" else (ln_block, ref_ln_block)
    check(lambda *t: coda_fn(*t, p), lambda *t: formula(*t, p), inputs, names,
          f"out_proj_residual -> {norm}_norm_linear {tokens}x{hidden}->{n}")
    # the statistics themselves, against float64 sums of CODA's own y
    y, ss, s = out_proj_residual(*inputs[:4], p, seed=SEED, stats="layer")
    y64 = ref_out_proj(*(t.double() for t in inputs[:4]), p)
    y_eager = ref_out_proj(*inputs[:4], p)
    assert_within_eager(f"out_proj_residual ss {tokens}x{hidden}", ss, (y_eager.float() ** 2).sum(-1),
                        (y64**2).sum(-1))
    assert_within_eager(f"out_proj_residual s {tokens}x{hidden}", s, y_eager.float().sum(-1), y64.sum(-1))
    assert y.dtype == BF16


# kernel counts (the lead's profiler) ---------------------------------------------------------------
def launch_count_cases():
    """(name, coda_fn, eager_fn): forward + backward once, bf16 on CUDA, hidden 2048, 4096 tokens."""
    torch.manual_seed(4)
    tokens, hidden, qkv = 4096, 2048, 3 * 2048

    def leaf(*shape, scale=1.0, shift=0.0):
        return param(*shape, scale=scale, shift=shift).requires_grad_()

    x, res, x_attn = leaf(tokens, hidden), leaf(tokens, hidden), leaf(tokens, hidden)
    g, beta = leaf(hidden, scale=0.2, shift=1.0), leaf(hidden, scale=0.1)
    w_o, b_o = leaf(hidden, hidden, scale=hidden**-0.5), leaf(hidden, scale=0.1)
    w_qkv, b_qkv = leaf(qkv, hidden, scale=hidden**-0.5), leaf(qkv, scale=0.1)
    dy = torch.randn(tokens, qkv, device="cuda", dtype=BF16)

    def fwd_bwd(fn, inputs):
        return lambda: torch.autograd.grad(fn(), inputs, dy)

    return [
        ("rms_norm_linear", fwd_bwd(lambda: rms_norm_linear(x, g, w_qkv), [x, g, w_qkv]),
         fwd_bwd(lambda: ref_rms(x, g, w_qkv), [x, g, w_qkv])),
        ("layer_norm_linear_bias",
         fwd_bwd(lambda: layer_norm_linear(x, g, beta, w_qkv, b_qkv), [x, g, beta, w_qkv, b_qkv]),
         fwd_bwd(lambda: ref_ln(x, g, beta, w_qkv, b_qkv), [x, g, beta, w_qkv, b_qkv])),
        ("out_proj_residual_rms_norm_linear",
         fwd_bwd(lambda: rms_block(x_attn, w_o, res, b_o, g, w_qkv, 0.0), [x_attn, w_o, res, b_o, g, w_qkv]),
         fwd_bwd(lambda: ref_rms_block(x_attn, w_o, res, b_o, g, w_qkv, 0.0),
                 [x_attn, w_o, res, b_o, g, w_qkv])),
        ("out_proj_residual_dropout_layer_norm_linear",
         fwd_bwd(lambda: ln_block(x_attn, w_o, res, b_o, g, beta, w_qkv, 0.1),
                 [x_attn, w_o, res, b_o, g, beta, w_qkv]),
         fwd_bwd(lambda: ref_ln(res + F.dropout(F.linear(x_attn, w_o, b_o), 0.1), g, beta, w_qkv),
                 [x_attn, w_o, res, b_o, g, beta, w_qkv])),
    ]
