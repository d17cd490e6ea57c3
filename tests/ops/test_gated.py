"""coda.ops gated MLPs (swiglu_mlp, geglu_mlp) and the fused QKV projection with RoPE (qkv_rope).

Each op is checked three ways: torch.autograd.gradcheck in float64 (reference backend) against
its own math; forward and every gradient against PyTorch autograd of the unfused formula written
here in float64 (separate gate and up weights, rope written out pair by pair); and the same in
float32 through the real Triton kernels (the Triton interpreter on CPU), at small odd shapes.

float32 tolerance: every compared value goes through at most three float32 GEMMs with reduction
depth K <= 96 and a few element-wise roundings, so its worst-case relative error is about
3 * 96 * 2**-24 ~ 1.7e-5; rounding errors are random, so the norm-wise errors seen are ~1e-7.
"""

from __future__ import annotations

import math

import pytest
import torch

import coda
from coda.ops.gated_mlp import deinterleave, geglu_mlp, interleave, swiglu_mlp
from coda.ops.rope import permute_for_interleaved_rope, qkv_rope, rope

TOL32 = 2e-5


def rel(a: torch.Tensor, ref: torch.Tensor) -> float:
    return ((a.double() - ref.double()).norm() / ref.double().norm().clamp_min(1e-300)).item()


def leaves(*tensors: torch.Tensor | None) -> list[torch.Tensor | None]:
    """Float64 copies that require grad: the unfused reference's inputs."""
    return [None if t is None else t.detach().double().requires_grad_() for t in tensors]


def grads_of(outputs, cotangents, inputs) -> list[torch.Tensor | None]:
    loss = sum((o * c.to(o.dtype)).sum() for o, c in zip(outputs, cotangents, strict=True))
    wanted = [t for t in inputs if t is not None]
    got = iter(torch.autograd.grad(loss, wanted))
    return [None if t is None else next(got) for t in inputs]


# --- gated MLP -----------------------------------------------------------------------------------
ACTS = {
    "swiglu": (swiglu_mlp, lambda g: g * torch.sigmoid(g)),
    "geglu": (geglu_mlp,
              lambda g: 0.5 * g * (1 + torch.tanh(math.sqrt(2 / math.pi) * (g + 0.044715 * g**3)))),
}


def gated_reference(act, x, w_gate, w_up, w_down, residual, rstd):
    """The unfused formula: RMSNorm's row scale, two projections, the gate, the down projection."""
    xs = x if rstd is None else x * rstd[..., None]
    y = (act(xs @ w_gate.T) * (xs @ w_up.T)) @ w_down.T
    y = y if residual is None else y + residual
    return y, (y * y).sum(-1)


def gated_inputs(lead, hidden, ffn, out, dtype, residual=True, rstd=True):
    torch.manual_seed(sum(lead) + hidden + ffn + out)
    x = torch.randn(*lead, hidden, dtype=dtype)
    w_gate = torch.randn(ffn, hidden, dtype=dtype) / hidden**0.5
    w_up = torch.randn(ffn, hidden, dtype=dtype) / hidden**0.5
    w_down = torch.randn(out, ffn, dtype=dtype) / ffn**0.5
    res = torch.randn(*lead, out, dtype=dtype) if residual else None
    r = torch.rand(*lead, dtype=dtype) + 0.5 if rstd else None
    return x, w_gate, w_up, w_down, res, r


def check_gated(name, lead, hidden, ffn, out, dtype, tol, residual=True, rstd=True, stats=True):
    fn, act = ACTS[name]
    x, w_gate, w_up, w_down, res, r = gated_inputs(lead, hidden, ffn, out, dtype, residual, rstd)
    inputs = [t if t is None else t.requires_grad_() for t in (x, interleave(w_gate, w_up), w_down, res, r)]
    got = fn(*inputs, stats=stats)
    got = got if stats else (got,)
    ref_in = leaves(x, w_gate, w_up, w_down, res, r)
    ref = gated_reference(act, *ref_in)[:len(got)]
    for a, b in zip(got, ref, strict=True):
        assert a.shape == b.shape and a.dtype == (dtype if a.dim() > len(lead) else torch.promote_types(
            dtype, torch.float32))
        assert rel(a, b) < tol, rel(a, b)
    cot = [torch.randn_like(b) for b in ref]
    dx, dwgu, dwd, dres, dr = grads_of(got, cot, inputs)
    rx, rg, ru, rd, rres, rr = grads_of(ref, cot, ref_in)
    for a, b in ((dx, rx), (dwgu, interleave(rg, ru)), (dwd, rd), (dres, rres), (dr, rr)):
        assert (a is None) == (b is None)
        if a is not None:
            assert a.shape == b.shape and a.dtype == dtype
            assert rel(a, b) < tol, rel(a, b)


def test_interleave_pairs_gate_and_up_columns():
    w_gate, w_up = torch.randn(5, 3), torch.randn(5, 3)
    w = interleave(w_gate, w_up)
    assert torch.equal(w[0::2], w_gate) and torch.equal(w[1::2], w_up)
    x = torch.randn(4, 3, dtype=torch.float64)
    out = x @ w.double().T
    assert torch.allclose(out[:, 2::2], x @ w_gate.double()[1:].T)   # column 2j is gate_j
    g, u = deinterleave(w)
    assert torch.equal(g, w_gate) and torch.equal(u, w_up) and g.is_contiguous()
    bias = interleave(torch.arange(3.0), -torch.arange(3.0))
    assert torch.equal(bias, torch.tensor([0, 0, 1, -1, 2, -2.0]))


@pytest.mark.parametrize("name", sorted(ACTS))
def test_a_row_scaled_by_zero_has_a_zero_scale_gradient(name):
    """A row whose rstd is 0 (a masked row) feeds f(0) * 0: its scale's gradient is 0, as
    float64 autograd of the unfused formula gives (the backward divides a row sum by rstd
    elsewhere; here it gave 0 / 0)."""
    fn, act = ACTS[name]
    x, w_gate, w_up, w_down, res, r = gated_inputs((5,), 6, 4, 3, torch.float64)
    r[1] = r[3] = 0.0
    inputs = [t.requires_grad_() for t in (x, interleave(w_gate, w_up), w_down, res, r)]
    ref_in = leaves(x, w_gate, w_up, w_down, res, r)
    cot = [torch.randn(5, 3, dtype=torch.float64)]
    got = grads_of([fn(*inputs)], cot, inputs)
    rx, rg, ru, rd, rres, rr = grads_of(gated_reference(act, *ref_in)[:1], cot, ref_in)
    assert rr[1] == 0 and rr[0] != 0
    for a, b in zip(got, (rx, interleave(rg, ru), rd, rres, rr), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", sorted(ACTS))
def test_gated_gradcheck_float64(name):
    fn, _ = ACTS[name]
    x, w_gate, w_up, w_down, res, r = gated_inputs((2, 3), 5, 4, 6, torch.float64)
    args = [t.requires_grad_() for t in (x, interleave(w_gate, w_up), w_down, res, r)]
    assert torch.autograd.gradcheck(lambda *a: fn(*a, stats=True), args)


@pytest.mark.parametrize("name", sorted(ACTS))
@pytest.mark.parametrize("variant", ["plain", "residual", "rstd", "all"])
def test_gated_matches_unfused_float64(name, variant):
    flags = {"plain": (False, False, False), "residual": (True, False, True), "rstd": (False, True, False),
             "all": (True, True, True)}[variant]
    residual, rstd, stats = flags
    check_gated(name, (3, 4), 7, 6, 5, torch.float64, 1e-12, residual, rstd, stats)


@pytest.mark.parametrize("name", sorted(ACTS))
@pytest.mark.parametrize(("lead", "hidden", "ffn", "out", "flags"), [
    ((37,), 24, 19, 24, (True, True, True)),        # odd M and F (2F = 38 columns), stats
    ((3, 11), 40, 48, 17, (False, True, False)),    # leading dims, odd output width, rstd only
    ((2, 16), 17, 33, 96, (True, False, True)),     # odd hidden and F, residual and stats
])
def test_gated_triton_float32(name, lead, hidden, ffn, out, flags):
    check_gated(name, lead, hidden, ffn, out, torch.float32, TOL32, *flags)


def test_gated_gradient_through_stats_only_and_no_grad():
    x, w_gate, w_up, w_down, res, r = gated_inputs((6,), 8, 5, 8, torch.float64)
    inputs = [t.requires_grad_() for t in (x, interleave(w_gate, w_up), w_down, res, r)]
    _, ss = swiglu_mlp(*inputs, stats=True)
    ref_in = leaves(x, w_gate, w_up, w_down, res, r)
    _, ss_ref = gated_reference(ACTS["swiglu"][1], *ref_in)
    got = grads_of([ss], [torch.ones_like(ss)], inputs)
    ref = grads_of([ss_ref], [torch.ones_like(ss_ref)], ref_in)
    assert rel(got[0], ref[0]) < 1e-12 and rel(got[4], ref[5]) < 1e-12
    with torch.no_grad():
        y = swiglu_mlp(*inputs)
    assert not y.requires_grad and rel(y, gated_reference(ACTS["swiglu"][1], *ref_in)[0]) < 1e-12


def test_gated_composes_with_an_rmsnorm():
    """The documented composition: RMSNorm(x) * g -> SwiGLU equals swiglu_mlp on the raw x with
    rstd = rsqrt(mean(x^2) + eps) and the gain folded into the weight, gradients included."""
    x, w_gate, w_up, w_down, res, _ = gated_inputs((4, 3), 6, 5, 6, torch.float64)
    g = torch.rand(6, dtype=torch.float64) + 0.5
    x, g, w_gate_up, w_down, res = (t.requires_grad_() for t in (x, g, interleave(w_gate, w_up), w_down, res))
    y = swiglu_mlp(x, w_gate_up * g, w_down, res, torch.rsqrt(x.square().mean(-1) + 1e-6))
    normed = x * torch.rsqrt(x.square().mean(-1, keepdim=True) + 1e-6) * g
    silu = ACTS["swiglu"][1]
    y_ref = (silu(normed @ w_gate_up[0::2].T) * (normed @ w_gate_up[1::2].T)) @ w_down.T + res
    cot = torch.randn_like(y)
    inputs = (x, g, w_gate_up, w_down, res)
    for a, b in zip(grads_of([y], [cot], inputs), grads_of([y_ref], [cot], inputs), strict=True):
        assert rel(a, b) < 1e-12
    assert rel(y, y_ref) < 1e-12


@pytest.mark.parametrize("name", sorted(ACTS))
@pytest.mark.parametrize(("dtype", "lead", "tol"), [(torch.float64, (4, 3), 1e-12),
                                                    (torch.float32, (37,), TOL32)])  # Triton kernels
def test_gated_owns_its_rmsnorm_and_the_residual_x(name, dtype, lead, tol, monkeypatch):
    """A pre-norm block's MLP, y = x + mlp(RMSNorm(x) * g), as swiglu_mlp(x, w * g, ...,
    residual=x, sumsq=Σ x²): the gradient through rstd(x) and the residual's join dx in the
    epilogue of dx's last GEMM (dx_program(None, True, True)); all gradients match the unfused formula
    in float64, sumsq is not differentiated."""
    from coda.ops import gated_mlp

    kinds = []
    original = gated_mlp.dx_program
    monkeypatch.setattr(gated_mlp, "dx_program", lambda *k: kinds.append(k) or original(*k))
    fn, act = ACTS[name]
    x, w_gate, w_up, w_down, _, _ = gated_inputs(lead, 24, 19, 24, dtype, False, False)
    g = torch.rand(24, dtype=dtype) + 0.5
    sumsq = x.double().square().sum(-1).to(torch.promote_types(dtype, torch.float32))
    inputs = [t.requires_grad_() for t in (x, g, w_gate, w_up, w_down)]
    got = fn(x, interleave(w_gate, w_up, gain=g), w_down, residual=x, sumsq=sumsq, eps=1e-5, stats=True)
    xr, gr, wg, wu, wd = ref_in = leaves(x, g, w_gate, w_up, w_down)
    normed = xr * torch.rsqrt(xr.square().mean(-1, keepdim=True) + 1e-5) * gr
    y_ref = (act(normed @ wg.T) * (normed @ wu.T)) @ wd.T + xr
    ref = (y_ref, y_ref.square().sum(-1))
    for a, b in zip(got, ref, strict=True):
        assert rel(a, b) < tol, rel(a, b)
    cot = [torch.randn_like(b) for b in ref]
    for a, b in zip(grads_of(got, cot, inputs), grads_of(ref, cot, ref_in), strict=True):
        assert a.dtype == dtype and rel(a, b) < tol, rel(a, b)
    assert kinds == [(None, True, True)]


@pytest.mark.parametrize("name", sorted(ACTS))
@pytest.mark.parametrize("given", ["sumsq", "rstd"])
def test_gated_float16_gradients_with_a_large_residual_stream(name, given):
    """float16 rows in the hundreds with the norm folded in (sumsq= or rstd=), a small upstream
    gradient (a loss scale that leaves eager's gradients in float16's normal range): every
    gradient within 2x eager float16's error of the unfused formula, both against float64. With
    r ⊙ d(gate, up) stored (the bfloat16 path) the gate/up weight gradient was 1/r = rms(x)
    times closer to float16's subnormals, and several times eager's error."""
    fn, act = ACTS[name]
    x, w_gate, w_up, w_down, _, _ = gated_inputs((96,), 32, 24, 32, torch.float16, False, False)
    x = x * 400
    g = (torch.rand(32) + 0.5).half()
    ss = x.double().square().sum(-1).float()
    rstd = torch.rsqrt(ss / 32 + 1e-5).half()
    cot = torch.randn(96, 32, dtype=torch.float16) * 2e-4

    def run(dtype, fused):
        ins = [t.detach().to(dtype).requires_grad_() for t in (x, g, w_gate, w_up, w_down)]
        xr, gr, wg, wu, wd = ins
        if fused:
            kw = dict(sumsq=ss, eps=1e-5) if given == "sumsq" else dict(rstd=rstd)
            y = fn(xr, interleave(wg, wu, gain=gr), wd, residual=xr, **kw)
        else:
            r = (torch.rsqrt(xr.square().mean(-1, keepdim=True) + 1e-5) if given == "sumsq"
                 else rstd.to(dtype)[:, None])
            normed = xr * r * gr
            y = (act(normed @ wg.T) * (normed @ wu.T)) @ wd.T + xr
        return torch.autograd.grad(y, ins, cot.to(dtype))
    exact, eager, coda_grads = run(torch.float64, False), run(torch.float16, False), run(torch.float16, True)
    names = "x g w_gate w_up w_down".split()
    for label, got, ours, want in zip(names, eager, coda_grads, exact, strict=True):
        assert rel(ours, want) <= 2 * rel(got, want) + 1e-6, (label, rel(ours, want), rel(got, want))


def test_gated_sumsq_gradcheck_float64():
    x, w_gate, w_up, w_down, _, _ = gated_inputs((5,), 6, 4, 6, torch.float64, False, False)
    args = [t.requires_grad_() for t in (x, interleave(w_gate, w_up), w_down)]
    # sumsq is Σ x² of the (perturbed) x, as a producer would give it, and not differentiated
    assert torch.autograd.gradcheck(lambda x, w, wd: swiglu_mlp(
        x, w, wd, residual=x, sumsq=x.detach().square().sum(-1), eps=1e-5), args)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"w_gate_up": torch.randn(7, 8)}, "w_gate_up is \\[7, 8\\]"),
    ({"w_gate_up": torch.randn(10, 9)}, "w_gate_up is \\[10, 9\\].*but x's last dimension is 8"),
    ({"w_down": torch.randn(8, 4)}, "w_down is \\[8, 4\\].*but half of w_gate_up's out_features is 5"),
    ({"w_down": torch.randn(8, 5, dtype=torch.float64)}, "w_down is torch.float64"),
    ({"residual": torch.randn(3, 7)}, "residual must be .*\\[3, 8\\]"),
    ({"rstd": torch.randn(3, 1)}, "rstd must be .*\\[3\\]"),
    ({"stats": 1}, "stats must be True or False"),
    ({"sumsq": torch.rand(3), "rstd": torch.rand(3)}, "rstd .* or sumsq .*, not both"),
    ({"sumsq": torch.rand(4)}, "sumsq must be one value per row of x, shape \\[3\\]"),
    ({"sumsq": torch.rand(3), "eps": -1.0}, "eps must be a number >= 0"),
    ({"x": torch.ones(3, 8, dtype=torch.int32)}, "x must be a floating-point tensor"),
])
def test_gated_errors_name_the_argument(kwargs, match):
    args = {"x": torch.randn(3, 8), "w_gate_up": torch.randn(10, 8), "w_down": torch.randn(8, 5)} | kwargs
    with pytest.raises(coda.LaunchError, match=match):
        swiglu_mlp(**args)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])   # reference backend, Triton kernels
def test_interleave_with_a_gain_and_its_gradients(dtype):
    """interleave(w_gate, w_up, gain) against torch's `interleave(...) * gain` in float64, forward
    and the gradients of both weights and the gain (float32: one rounding a value, dgain a sum
    of 2F = 74 products: well under TOL32)."""
    torch.manual_seed(7)
    w_gate, w_up = torch.randn(37, 45, dtype=dtype), torch.randn(37, 45, dtype=dtype)
    gain = torch.rand(45, dtype=dtype) + 0.5
    inputs = [t.requires_grad_() for t in (w_gate, w_up, gain)]
    ref_in = leaves(w_gate, w_up, gain)
    got = interleave(*inputs)
    want = torch.stack(ref_in[:2], dim=1).flatten(0, 1) * ref_in[2]
    assert got.shape == (74, 45) and got.dtype == dtype
    assert rel(got, want) < TOL32
    cot = torch.randn_like(want)
    for a, b in zip(grads_of([got], [cot], inputs), grads_of([want], [cot], ref_in), strict=True):
        assert a.shape == b.shape and a.dtype == dtype and a.is_contiguous()
        assert rel(a, b) < TOL32, rel(a, b)
    if dtype == torch.float64:
        args = [t.detach().requires_grad_() for t in (w_gate[:5, :4], w_up[:5, :4], gain[:4])]
        assert torch.autograd.gradcheck(lambda *a: interleave(*a), args)


def test_interleave_errors():
    with pytest.raises(coda.LaunchError, match="w_gate and w_up"):
        interleave(torch.randn(3, 4), torch.randn(4, 4))
    with pytest.raises(coda.LaunchError, match="gain must be"):
        interleave(torch.randn(3, 4), torch.randn(3, 4), gain=torch.randn(3))
    with pytest.raises(coda.LaunchError, match="weights \\[F, H\\]"):
        interleave(torch.randn(3), torch.randn(3), gain=torch.randn(3))
    with pytest.raises(coda.LaunchError, match="even first dimension"):
        deinterleave(torch.randn(3, 4))
    with pytest.raises(coda.LaunchError, match="w_up must be a tensor \\[F, H\\], got float"):
        interleave(torch.randn(3, 4), 1.0)


# --- QKV projection + RoPE ------------------------------------------------------------------------
def rope_tables(positions: torch.Tensor, head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    freq = 10000.0 ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angle = positions.double()[..., None] * freq
    return angle.cos(), angle.sin()


def rope_interleaved(t, cos, sin):
    """t [..., heads, d]: pair i = (2i, 2i + 1) rotated by angle i; cos/sin [..., d/2]."""
    a, b = t[..., 0::2], t[..., 1::2]
    c, s = cos[..., None, :], sin[..., None, :]
    return torch.stack((a * c - b * s, a * s + b * c), -1).flatten(-2)


def rope_rotate_half(t, cos, sin):
    """HuggingFace's convention: pair i = (i, i + d/2); cos/sin [..., d/2] (HF repeats them twice)."""
    half = t.shape[-1] // 2
    c, s = torch.cat((cos, cos), -1)[..., None, :], torch.cat((sin, sin), -1)[..., None, :]
    rotated = torch.cat((-t[..., half:], t[..., :half]), -1)
    return t * c + rotated * s


def qkv_reference(x, w, bias, cos, sin, heads, rope=rope_interleaved):
    n_heads, n_kv, d = heads
    pre = x @ w.T if bias is None else x @ w.T + bias
    q, k, v = pre.split((n_heads * d, n_kv * d, n_kv * d), -1)
    q, k, v = q.unflatten(-1, (n_heads, d)), k.unflatten(-1, (n_kv, d)), v.unflatten(-1, (n_kv, d))
    return rope(q, cos, sin), rope(k, cos, sin), v


def qkv_inputs(lead, hidden, heads, dtype, bias):
    torch.manual_seed(hidden + sum(heads))
    n = (heads[0] + 2 * heads[1]) * heads[2]
    x = torch.randn(*lead, hidden, dtype=dtype)
    w = torch.randn(n, hidden, dtype=dtype) / hidden**0.5
    b = torch.randn(n, dtype=dtype) if bias else None
    cos, sin = rope_tables(torch.randint(0, 4096, lead[-1:]), heads[2])   # [seq, d/2], broadcast
    return x, w, b, cos.to(dtype), sin.to(dtype)


def check_qkv(lead, hidden, heads, dtype, bias, tol, used=(True, True, True)):
    x, w, b, cos, sin = qkv_inputs(lead, hidden, heads, dtype, bias)
    inputs = [t if t is None else t.requires_grad_() for t in (x, w, b)]
    got = qkv_rope(inputs[0], inputs[1], cos, sin, *heads, bias=inputs[2])
    ref_in = leaves(x, w, b)
    ref = qkv_reference(*ref_in, cos.double(), sin.double(), heads)
    for a, r in zip(got, ref, strict=True):
        assert a.shape == r.shape and a.dtype == dtype and rel(a, r) < tol, rel(a, r)
    pick = [i for i in range(3) if used[i]]
    cot = [torch.randn_like(ref[i]) for i in pick]
    for a, r in zip(grads_of([got[i] for i in pick], cot, inputs),
                    grads_of([ref[i] for i in pick], cot, ref_in), strict=True):
        assert (a is None) == (r is None)
        if a is not None:
            assert a.shape == r.shape and a.dtype == dtype and rel(a, r) < tol, rel(a, r)


def test_qkv_rope_gradcheck_float64():
    x, w, b, cos, sin = qkv_inputs((2, 3), 5, (2, 1, 4), torch.float64, True)
    args = [t.requires_grad_() for t in (x, w, b)]
    assert torch.autograd.gradcheck(lambda x, w, b: qkv_rope(x, w, cos, sin, 2, 1, 4, bias=b), args)


@pytest.mark.parametrize(("heads", "bias", "used"), [
    ((4, 2, 6), True, (True, True, True)),      # GQA with bias
    ((3, 3, 4), False, (True, False, True)),    # multi-head, k unused: a None gradient
])
def test_qkv_rope_matches_unfused_float64(heads, bias, used):
    check_qkv((2, 5), 9, heads, torch.float64, bias, 1e-12, used)


@pytest.mark.parametrize(("lead", "hidden", "heads", "bias"), [
    ((2, 13), 40, (4, 2, 8), True),      # GQA, odd sequence, bias
    ((31,), 17, (3, 1, 10), False),      # odd M and hidden, head_dim 10 (5 frequencies)
    ((3, 7), 96, (2, 2, 16), True),
])
def test_qkv_rope_triton_float32(lead, hidden, heads, bias):
    check_qkv(lead, hidden, heads, torch.float32, bias, TOL32)


def rms_norm(x, g, eps=1e-6):
    return x * torch.rsqrt(x.square().mean(-1, keepdim=True) + eps) * g


@pytest.mark.parametrize(("lead", "hidden", "heads", "bias", "dtype", "tol"), [
    ((2, 5), 9, (4, 2, 6), True, torch.float64, 1e-12),     # reference backend
    ((2, 13), 40, (4, 2, 8), False, torch.float32, TOL32),  # Triton interpreter, GQA
    ((31,), 17, (3, 1, 10), True, torch.float32, TOL32),    # odd M and hidden
])
@pytest.mark.parametrize("given_sumsq", [False, True])
def test_qkv_rope_with_the_norm_folded_in(lead, hidden, heads, bias, dtype, tol, given_sumsq):
    """norm_weight: q, k, v of RMSNorm(x) (x's statistics given or computed), passthrough x whose
    residual gradient joins dx; every gradient (x, g, w, bias) against float64 autograd."""
    x, w, b, cos, sin = qkv_inputs(lead, hidden, heads, dtype, bias)
    g = torch.rand(hidden, dtype=dtype) + 0.5
    sumsq = x.double().square().sum(-1).to(torch.promote_types(dtype, torch.float32)) if given_sumsq else None
    inputs = [t if t is None else t.requires_grad_() for t in (x, g, w, b)]
    *got, passed = qkv_rope(inputs[0], inputs[2], cos, sin, *heads, bias=inputs[3], norm_weight=inputs[1],
                            eps=1e-6, sumsq=sumsq, passthrough=True)
    ref_in = leaves(x, g, w, b)
    ref = qkv_reference(rms_norm(ref_in[0], ref_in[1]), ref_in[2], ref_in[3], cos.double(), sin.double(),
                        heads)
    for a, r in zip(got, ref, strict=True):
        assert a.shape == r.shape and a.dtype == dtype and rel(a, r) < tol, rel(a, r)
    cot = [torch.randn_like(r) for r in ref]
    dres = torch.randn_like(ref_in[0])
    outs = (*got, passed), (*ref, ref_in[0])
    for a, r in zip(grads_of(outs[0], [*cot, dres.to(dtype)], inputs),
                    grads_of(outs[1], [*cot, dres], ref_in), strict=True):
        assert (a is None) == (r is None)
        if a is not None:
            assert a.shape == r.shape and a.dtype == dtype and rel(a, r) < tol, rel(a, r)


def test_qkv_rope_with_the_norm_gradcheck_float64():
    x, w, b, cos, sin = qkv_inputs((2, 3), 5, (2, 1, 4), torch.float64, True)
    g = torch.rand(5, dtype=torch.float64) + 0.5
    args = [t.requires_grad_() for t in (x, g, w, b)]
    assert torch.autograd.gradcheck(
        lambda x, g, w, b: qkv_rope(x, w, cos, sin, 2, 1, 4, bias=b, norm_weight=g), args)


def test_qkv_rope_with_the_norm_and_only_v_used():
    """Only v reaches the loss: dq and dk are None, their blocks of the gradient zero."""
    x, w, _, cos, sin = qkv_inputs((2, 4), 8, (2, 1, 4), torch.float64, False)
    g = torch.rand(8, dtype=torch.float64) + 0.5
    inputs = [t.requires_grad_() for t in (x, g, w)]
    v = qkv_rope(inputs[0], inputs[2], cos, sin, 2, 1, 4, norm_weight=inputs[1])[2]
    ref_in = leaves(x, g, w)
    ref_v = qkv_reference(rms_norm(ref_in[0], ref_in[1]), ref_in[2], None, cos, sin, (2, 1, 4))[2]
    cot = torch.randn_like(ref_v)
    for a, r in zip(grads_of([v], [cot], inputs), grads_of([ref_v], [cot], ref_in), strict=True):
        assert rel(a, r) < 1e-12


def test_rotate_half_checkpoints_give_the_same_attention():
    """HF's rotate_half rope on the original weights and CODA's interleaved rope on weights with
    permuted q and k rows give the same attention probabilities (and q, k up to that permutation)."""
    heads = n_heads, n_kv, d = (4, 2, 8)
    x, w, b, cos, sin = qkv_inputs((2, 6), 16, heads, torch.float64, True)
    q_hf, k_hf, v_hf = qkv_reference(x, w, b, cos, sin, heads, rope=rope_rotate_half)
    wq, wk, wv = w.split((n_heads * d, n_kv * d, n_kv * d))
    bq, bk, bv = b.split((n_heads * d, n_kv * d, n_kv * d))
    w_perm = torch.cat((permute_for_interleaved_rope(wq, n_heads, d),
                        permute_for_interleaved_rope(wk, n_kv, d), wv))
    b_perm = torch.cat((permute_for_interleaved_rope(bq, n_heads, d),
                        permute_for_interleaved_rope(bk, n_kv, d), bv))
    q, k, v = qkv_rope(x, w_perm, cos, sin, *heads, bias=b_perm)

    def probs(q, k):   # [batch, heads, seq, seq], k heads repeated for their query group
        k = k.repeat_interleave(n_heads // n_kv, dim=-2)
        return torch.softmax(torch.einsum("bshd,bthd->bhst", q, k) / d**0.5, dim=-1)

    assert torch.allclose(probs(q, k), probs(q_hf, k_hf), rtol=0, atol=1e-13)
    assert not torch.allclose(q, q_hf) and torch.equal(v, v_hf)
    perm = permute_for_interleaved_rope(torch.arange(d), 1, d)
    assert torch.allclose(q, q_hf[..., perm], atol=1e-13) and torch.allclose(k, k_hf[..., perm], atol=1e-13)
    assert torch.equal(permute_for_interleaved_rope(w_perm[:n_heads * d], n_heads, d, inverse=True), wq)


def rope_reference(t, cos, sin, head_dim, n_rot):
    """The first n_rot columns of t [..., N] rotated per head, the rest as they are."""
    rotated = rope_interleaved(t[..., :n_rot].unflatten(-1, (-1, head_dim)), cos, sin).flatten(-2)
    return torch.cat((rotated, t[..., n_rot:]), -1)


@pytest.mark.parametrize(("lead", "n", "head_dim", "n_rot", "dtype", "tol"), [
    ((2, 5), 24, 4, 16, torch.float64, 1e-12),    # q and k rotated, v not (reference backend)
    ((2, 13), 48, 8, 48, torch.float32, TOL32),   # every column (Triton interpreter)
    ((31,), 30, 10, 20, torch.float32, TOL32),    # odd M, head_dim 10
    ((7,), 23, 10, 20, torch.float32, TOL32),     # an odd width: its last three columns copied
])
def test_rope_map_and_its_gradient(lead, n, head_dim, n_rot, dtype, tol):
    torch.manual_seed(n + n_rot)
    x = torch.randn(*lead, n, dtype=dtype, requires_grad=True)
    cos, sin = rope_tables(torch.randint(0, 4096, lead[-1:]), head_dim)
    got = rope(x, cos.to(dtype), sin.to(dtype), head_dim, n_rot)
    ref_x = x.detach().double().requires_grad_()
    ref = rope_reference(ref_x, cos, sin, head_dim, n_rot)
    assert got.shape == x.shape and got.dtype == dtype and rel(got, ref) < tol, rel(got, ref)
    cot = torch.randn_like(ref)
    (dx,) = torch.autograd.grad(got, x, cot.to(dtype))
    (ref_dx,) = torch.autograd.grad(ref, ref_x, cot)
    assert rel(dx, ref_dx) < tol, rel(dx, ref_dx)


def test_rope_gradcheck_float64():
    x = torch.randn(3, 4, 16, dtype=torch.float64, requires_grad=True)
    cos, sin = rope_tables(torch.arange(4), 8)
    assert torch.autograd.gradcheck(lambda x: rope(x, cos, sin, 8, 8), [x])


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"n_rot": 12}, "n_rot must be a multiple of head_dim = 8 in \\(0, 16\\]"),
    ({"n_rot": 24}, "n_rot must be"),
    ({"x": torch.randn(3, 12)}, "x.s last dimension \\(12\\) must be a multiple of head_dim = 8 .* n_rot="),
    ({"head_dim": 7}, "head_dim must be even"),
    ({"cos": torch.randn(3, 8)}, "cos must be .*take cos\\[..., :4\\]"),
    ({"x": torch.ones(3, 16, dtype=torch.int32)}, "x must be a floating-point tensor"),
    ({"sin": torch.ones(3, 4, dtype=torch.int32)}, "sin must be a floating-point tensor broadcastable"),
])
def test_rope_errors_name_the_argument(kwargs, match):
    args = {"x": torch.randn(3, 16), "cos": torch.randn(3, 4), "sin": torch.randn(3, 4),
            "head_dim": 8} | kwargs
    with pytest.raises(coda.LaunchError, match=match):
        rope(**args)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"head_dim": 5, "w_qkv": torch.randn(20, 8)}, "head_dim must be even"),
    ({"n_kv_heads": 0}, "n_kv_heads must be a positive int"),
    ({"w_qkv": torch.randn(24, 8)}, "w_qkv must be .*\\[32, 8\\]"),
    ({"w_qkv": torch.randn(32, 8, dtype=torch.float64)}, "w_qkv has dtype torch.float64"),
    ({"bias": torch.randn(31)}, "bias must be a tensor \\[32\\]"),
    ({"cos": torch.randn(3, 8)}, "cos must be .*take cos\\[..., :4\\]"),
    ({"sin": torch.randn(5, 4)}, "sin is \\[5, 4\\]: it must broadcast"),
    ({"cos": torch.randn(3, 4, requires_grad=True)}, "cos requires grad"),
    ({"sumsq": torch.rand(3)}, "sumsq is the RMSNorm's statistics; it needs norm_weight"),
    ({"norm_weight": torch.rand(7)}, "qkv_rope: norm_weight must have shape \\[8\\]"),
    ({"norm_weight": torch.rand(8), "sumsq": torch.rand(4)}, "sumsq must have one value per row"),
    ({"norm_weight": torch.rand(8), "eps": -1.0}, "eps"),
    ({"passthrough": 1}, "passthrough"),
    ({"x": torch.ones(3, 8, dtype=torch.int32)}, "x must be a floating-point tensor \\[..., hidden\\]"),
])
def test_qkv_rope_errors_name_the_argument(kwargs, match):
    args = {"x": torch.randn(3, 8), "w_qkv": torch.randn(32, 8), "cos": torch.randn(3, 4),
            "sin": torch.randn(3, 4), "n_heads": 2, "n_kv_heads": 1, "head_dim": 8} | kwargs
    with pytest.raises(coda.LaunchError, match=match):
        qkv_rope(**args)


def test_permute_errors():
    with pytest.raises(coda.LaunchError, match="w must be a tensor \\[n_heads \\* head_dim = 16"):
        permute_for_interleaved_rope(torch.randn(12, 3), 2, 8)
