"""GPU checks of the gated MLPs (swiglu_mlp, geglu_mlp) and qkv_rope in bfloat16 at real shapes.

For every output and every gradient: the relative error of CODA against the unfused formula in
float64 (on the same bf16 inputs, upcast) must be at most twice the relative error of eager
PyTorch running the unfused formula in bf16 (plus 1e-6). `launch_count_cases()` gives the
lead's profiler one forward + backward of each op and of its eager counterpart.
"""

from __future__ import annotations

import pytest
import torch
from accuracy import assert_within_eager

from coda.ops.gated_mlp import geglu_mlp, interleave, swiglu_mlp
from coda.ops.rope import qkv_rope

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

ACTIVATIONS = {"swiglu": (swiglu_mlp, torch.nn.functional.silu),
               "geglu": (geglu_mlp, lambda g: torch.nn.functional.gelu(g, approximate="tanh"))}


def gated_eager(act, x, w_gate_up, w_down, residual, rstd):
    """The unfused formula (HF LLaMA style: the norm's row scale in float32, two projections)."""
    xn = x if rstd is None else (x.to(rstd.dtype) * rstd[..., None]).to(x.dtype)
    h = act(xn @ w_gate_up[0::2].T) * (xn @ w_gate_up[1::2].T)
    y = h @ w_down.T + residual
    return y, y.to(torch.promote_types(y.dtype, torch.float32)).square().sum(-1)


def gated_case(name: str, tokens: int, hidden: int, ffn: int, rstd: bool):
    """(coda_fn, eager_fn, ref64_fn, inputs, cotangents): each fn maps its inputs to (y, ss)."""
    torch.manual_seed(tokens + hidden + ffn)
    dev, bf = "cuda", torch.bfloat16
    x = torch.randn(2, tokens // 2, hidden, device=dev, dtype=bf)
    w_gate_up = interleave(torch.randn(ffn, hidden, device=dev, dtype=bf) / hidden**0.5,
                           torch.randn(ffn, hidden, device=dev, dtype=bf) / hidden**0.5)
    w_down = torch.randn(hidden, ffn, device=dev, dtype=bf) / ffn**0.5
    residual = torch.randn(2, tokens // 2, hidden, device=dev, dtype=bf)
    r = torch.rand(2, tokens // 2, device=dev) + 0.5 if rstd else None
    inputs = [t for t in (x, w_gate_up, w_down, residual, r) if t is not None]
    cot = (torch.randn_like(residual), torch.randn(2, tokens // 2, device=dev) * 0.1)
    fn, act = ACTIVATIONS[name]

    def split(args):
        return (*args[:4], args[4] if rstd else None)

    return ((lambda *a: fn(*split(a), stats=True)), (lambda *a: gated_eager(act, *split(a))),
            (lambda *a: gated_eager(act, *split(a))), inputs, cot)


def prenorm_case(tokens: int, hidden: int, ffn: int, device: str = "cuda", dtype=torch.bfloat16,
                 rows: float = 1.0, grads: float = 1.0):
    """A LLaMA block's MLP half as `coda.patch` runs it, y = h + mlp(RMSNorm(h) * g):
    swiglu_mlp owning the norm (sumsq=) with the gain folded by interleave(gain=) and the residual
    h itself, against HF's RMSNorm (float32 row scale) and MLP. Inputs h, w_gate, w_up, g, w_down;
    h's rows of rms `rows`, the upstream gradients of `grads` (float16 with a large residual
    stream and a small loss scale: docs/ops.md)."""
    torch.manual_seed(tokens + hidden + ffn + 1)
    h = (torch.randn(2, tokens // 2, hidden, device=device) * rows).to(dtype)
    w_gate, w_up = (torch.randn(ffn, hidden, device=device, dtype=dtype) / hidden**0.5 for _ in range(2))
    g = (torch.rand(hidden, device=device) + 0.5).to(dtype)
    w_down = torch.randn(hidden, ffn, device=device, dtype=dtype) / ffn**0.5
    eps = 1e-5

    def coda_fn(h, w_gate, w_up, g, w_down):
        sumsq = h.detach().to(torch.promote_types(h.dtype, torch.float32)).square().sum(-1)
        return swiglu_mlp(h, interleave(w_gate, w_up, gain=g), w_down, residual=h, sumsq=sumsq, eps=eps,
                          stats=True)

    def eager_fn(h, w_gate, w_up, g, w_down):
        wide = h.to(torch.promote_types(h.dtype, torch.float32))
        xn = (wide * torch.rsqrt(wide.square().mean(-1, keepdim=True) + eps)).to(h.dtype) * g
        y = h + (torch.nn.functional.silu(xn @ w_gate.T) * (xn @ w_up.T)) @ w_down.T
        return y, y.to(wide.dtype).square().sum(-1)

    cot = (torch.randn_like(h) * grads, torch.randn(2, tokens // 2, device=device) * 0.1 * grads / rows)
    return coda_fn, eager_fn, eager_fn, [h, w_gate, w_up, g, w_down], cot


def qkv_eager(x, w, bias, cos, sin, heads):
    """The unfused formula: one projection, split, interleaved rope on q and k."""
    n_heads, n_kv, d = heads
    pre = torch.nn.functional.linear(x, w, bias)
    q, k, v = pre.split((n_heads * d, n_kv * d, n_kv * d), -1)

    def rope(t, n):
        t = t.unflatten(-1, (n, d))
        a, b = t[..., 0::2], t[..., 1::2]
        c, s = cos[..., None, :].to(t.dtype), sin[..., None, :].to(t.dtype)
        return torch.stack((a * c - b * s, a * s + b * c), -1).flatten(-2)

    return rope(q, n_heads), rope(k, n_kv), v.unflatten(-1, (n_kv, d))


def qkv_case(tokens: int, hidden: int, heads: tuple[int, int, int], bias: bool, norm: bool = False):
    """qkv_rope against its unfused formula; `norm`: of RMSNorm(x; g) (norm_weight=g), eager's
    norm torch's rms_norm."""
    torch.manual_seed(tokens + hidden)
    dev, bf = "cuda", torch.bfloat16
    n_heads, n_kv, d = heads
    n = (n_heads + 2 * n_kv) * d
    x = torch.randn(2, tokens // 2, hidden, device=dev, dtype=bf)
    w = torch.randn(n, hidden, device=dev, dtype=bf) / hidden**0.5
    b = torch.randn(n, device=dev, dtype=bf) if bias else None
    g = (torch.rand(hidden, device=dev) + 0.5).to(bf) if norm else None
    freq = 10000.0 ** (-torch.arange(0, d, 2, device=dev, dtype=torch.float64) / d)
    angle = torch.arange(tokens // 2, device=dev, dtype=torch.float64)[:, None] * freq
    cos, sin = angle.cos().float(), angle.sin().float()   # [seq, d/2], float32 tables
    inputs = [t for t in (x, w, b, g) if t is not None]

    def args(a):   # x (normalized when norm), w, bias
        x = torch.nn.functional.rms_norm(a[0], (hidden,), a[-1], eps=1e-6) if norm else a[0]
        return x, a[1], a[2] if bias else None

    def fused(*a):
        return qkv_rope(a[0], a[1], cos, sin, *heads, bias=a[2] if bias else None,
                        norm_weight=a[-1] if norm else None)

    cot = tuple(torch.randn(2, tokens // 2, h, d, device=dev, dtype=bf) for h in (n_heads, n_kv, n_kv))
    return (fused, (lambda *a: qkv_eager(*args(a), cos, sin, heads)),
            (lambda *a: qkv_eager(*args(a), cos.double(), sin.double(), heads)), inputs, cot)


def run(fn, inputs, cot, dtype=None):
    leaves = [t.detach().to(dtype or t.dtype).requires_grad_() for t in inputs]
    outs = fn(*leaves)
    loss = sum((o * c.to(o.dtype)).sum() for o, c in zip(outs, cot, strict=True))
    return [o.detach() for o in outs] + list(torch.autograd.grad(loss, leaves))


CASES = {
    "swiglu_h2048_rstd": lambda: gated_case("swiglu", 4096, 2048, 5632, rstd=True),
    "swiglu_h4096_rstd": lambda: gated_case("swiglu", 2048, 4096, 11008, rstd=True),
    "geglu_h768": lambda: gated_case("geglu", 4096, 768, 3072, rstd=False),
    "swiglu_h2048_prenorm_gain": lambda: prenorm_case(4096, 2048, 5632),
    # float16, rows near 300, gradients near 1e-3 (the float16 path stores d(gate, up) unscaled)
    "swiglu_h2048_prenorm_fp16_large_rows": lambda: prenorm_case(4096, 2048, 5632, dtype=torch.float16,
                                                                 rows=300.0, grads=1e-3),
    "qkv_rope_h4096_gqa": lambda: qkv_case(2048, 4096, (32, 8, 128), bias=False),
    "qkv_rope_h768_bias": lambda: qkv_case(4096, 768, (12, 12, 64), bias=True),
    "qkv_rope_h2048_gqa_bias": lambda: qkv_case(4096, 2048, (16, 4, 128), bias=True),
    "qkv_rope_h2048_gqa_norm": lambda: qkv_case(4096, 2048, (16, 4, 128), bias=False, norm=True),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_bf16_error_within_twice_eager(name):
    coda_fn, eager_fn, ref_fn, inputs, cot = CASES[name]()
    got = run(coda_fn, inputs, cot)
    again = run(coda_fn, inputs, cot)
    eager = run(eager_fn, inputs, cot)
    exact = run(ref_fn, inputs, cot, torch.float64)
    for i, (a, e, x) in enumerate(zip(got, eager, exact, strict=True)):
        assert a.shape == x.shape and torch.isfinite(a.float()).all(), i
        assert torch.equal(a, again[i]), f"{name} result {i}: two runs differ"
        assert_within_eager(f"{name} result {i}", a, e, x)


def launch_count_cases() -> list[tuple[str, object, object]]:
    """(name, coda_fn, eager_fn): one forward + backward each, bf16, hidden 2048, 4096 tokens."""
    cases = []
    for name, make in (("swiglu_mlp", lambda: gated_case("swiglu", 4096, 2048, 5632, rstd=True)),
                       ("qkv_rope", lambda: qkv_case(4096, 2048, (16, 4, 128), bias=False))):
        coda_fn, eager_fn, _, inputs, cot = make()
        cases.append((name, lambda f=coda_fn, i=inputs, c=cot: run(f, i, c),
                      lambda f=eager_fn, i=inputs, c=cot: run(f, i, c)))
    return cases
