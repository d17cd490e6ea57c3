"""coda.ops.rms_norm_linear, layer_norm_linear and out_proj_residual against the plain formulas.

- float64 on the reference backend: torch.autograd.gradcheck (the math of each backward, including
  the composition out_proj_residual -> norm_linear(statistics from the producer)), and the forward
  and every gradient against PyTorch autograd of the unfused formula written here;
- float32 through the Triton interpreter (the real kernels) at small odd shapes, against the same
  float64 formula;
- LayerNorm's statistics when |mean| >> std (the cancellation in E[x²] - mean²), measured;
- argument errors name the argument.
"""

from __future__ import annotations

import pytest
import torch
from test_linear import zero_fills

import coda
from coda.ops.norms import layer_norm_linear, out_proj_residual, rms_norm_linear
from oracle import philox_uniform

F64 = torch.float64
F32 = torch.float32
TOL32 = 2e-5


# the unfused formulas, in plain torch ops ----------------------------------------------------------
def ref_rms(x, g, w, eps, bias=None):
    h = x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * g
    return h @ w.T + (0 if bias is None else bias)


def ref_ln(x, g, beta, w, bias=None, eps=1e-5):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    h = (x - mean) / torch.sqrt(var + eps) * g + beta
    return h @ w.T + (0 if bias is None else bias)


def keep_mask(seed: int, p: float, m: int, n: int) -> torch.Tensor:
    """The contract's dropout mask over an [m, n] output (pure-Python Philox, tests/oracle.py)."""
    u = [[philox_uniform(seed, i, j) for j in range(n)] for i in range(m)]
    return torch.tensor(u, dtype=F64) >= p


def ref_out_proj(x, w, residual, bias=None, p=0.0, seed=0):
    h = x @ w.T + (0 if bias is None else bias)
    if p > 0:
        rows = h.reshape(-1, h.shape[-1])
        h = (rows * keep_mask(seed, p, *rows.shape) / (1 - p)).reshape(h.shape)
    return residual + h


# helpers ------------------------------------------------------------------------------------------
def make(*shapes, dtype=F64, seed=0, scale=1.0, shift=0.0):
    g = torch.Generator().manual_seed(seed)
    return [None if s is None else (torch.randn(*s, generator=g, dtype=F64) * scale + shift).to(dtype)
            .requires_grad_() for s in shapes]


def upcast(tensors):
    return [None if t is None else t.detach().to(F64).requires_grad_() for t in tensors]


def forward_backward(fn, inputs, upstream_seed=1):
    """fn's output and the gradients of <output, upstream> w.r.t. every tensor input."""
    y = fn(*inputs)
    g = torch.randn(y.shape, generator=torch.Generator().manual_seed(upstream_seed), dtype=F64)
    grads = torch.autograd.grad(y, [t for t in inputs if t is not None], g.to(y.dtype))
    return y, grads


def assert_matches(got, want, tol):
    """Every tensor within `tol` of the float64 one, relative to its largest magnitude."""
    for a, b in zip((got[0], *got[1]), (want[0], *want[1]), strict=True):
        assert a.shape == b.shape
        torch.testing.assert_close(a.to(F64), b.detach(), rtol=tol, atol=tol * max(b.abs().max().item(), 1.0))


def rel(x: torch.Tensor, ref: torch.Tensor) -> float:
    return ((x.detach().to(F64) - ref).norm() / ref.norm()).item()


# float64, reference backend -----------------------------------------------------------------------
@pytest.mark.parametrize("with_bias", [False, True])
def test_rms_norm_linear_float64(with_bias):
    inputs = make((2, 3, 7), (7,), (5, 7), (5,) if with_bias else None, seed=1)
    fn = lambda x, g, w, b: rms_norm_linear(x, g, w, 1e-6, bias=b)  # noqa: E731
    assert torch.autograd.gradcheck(fn, inputs)
    assert_matches(forward_backward(fn, inputs),
                   forward_backward(lambda x, g, w, b: ref_rms(x, g, w, 1e-6, b), upcast(inputs)), 1e-12)


def test_rms_norm_linear_float64_sumsq_is_a_function_of_x():
    """With sumsq given, the backward still differentiates rstd(x): gradcheck recomputes Σ x² for
    every perturbed x (as the producer would), the analytical gradient comes from x alone."""
    inputs = make((6, 7), (7,), (5, 7), seed=2)
    fn = lambda x, g, w: rms_norm_linear(x, g, w, 1e-6, sumsq=(x * x).sum(-1).detach())  # noqa: E731
    assert torch.autograd.gradcheck(fn, inputs)
    assert_matches(forward_backward(fn, inputs),
                   forward_backward(lambda x, g, w: ref_rms(x, g, w, 1e-6), upcast(inputs)), 1e-12)


@pytest.mark.parametrize(("with_bias", "given_stats"), [(False, False), (True, False), (True, True)])
def test_layer_norm_linear_float64(with_bias, given_stats):
    inputs = make((2, 3, 7), (7,), (7,), (5, 7), (5,) if with_bias else None, seed=3)

    def fn(x, g, beta, w, b):
        stats = dict(rowsum=x.sum(-1).detach(), sumsq=(x * x).sum(-1).detach()) if given_stats else {}
        return layer_norm_linear(x, g, beta, w, bias=b, **stats)

    assert torch.autograd.gradcheck(fn, inputs)
    assert_matches(forward_backward(fn, inputs), forward_backward(ref_ln, upcast(inputs)), 1e-12)


@pytest.mark.parametrize("op", ["layer_norm_linear", "out_proj_residual"])
def test_long_k_bias_gradient_comes_from_a_map(op, monkeypatch):
    """From common.SUMS_IN_GEMM_MAX_K on (lowered here to the test's width) dx's GEMM takes no
    column sums: the bias gradient comes from a column-sum map and dx from a plain GEMM (the
    Triton backend, float32), both matching float64; below it one GEMM takes both."""
    from coda.ops import common, norms

    summed, plain = [], common.PLAIN
    for module in (common, norms):
        monkeypatch.setattr(module, "PLAIN", lambda *a, **k: summed.append(k.get("a_col_sums", False))
                            or plain(*a, **k))
    for limit, sums_in_gemm in ((4096, True), (16, False)):
        monkeypatch.setattr(common, "SUMS_IN_GEMM_MAX_K", limit)
        summed.clear()
        if op == "layer_norm_linear":
            inputs = make((19, 45), (45,), (45,), (64, 45), (64,), dtype=F32, seed=9)
            inputs[3].data /= 45**0.5
            got, want = (forward_backward(fn, ins) for fn, ins in ((layer_norm_linear, inputs),
                                                                    (ref_ln, upcast(inputs))))
        else:
            inputs = make((19, 40), (64, 40), (19, 64), (64,), dtype=F32, seed=9)
            first = lambda *t: out_proj_residual(*t, stats="rms")[0]  # noqa: E731
            got, want = forward_backward(first, inputs), forward_backward(ref_out_proj, upcast(inputs))
        assert_matches(got, want, TOL32)
        assert any(summed) == sums_in_gemm, (limit, summed)


@pytest.mark.parametrize(("stats", "p", "with_bias"), [("rms", 0.0, True), ("layer", 0.4, True),
                                                       (None, 0.4, False), ("rms", 0.0, False)])
def test_out_proj_residual_float64(stats, p, with_bias):
    inputs = make((2, 3, 6), (5, 6), (2, 3, 5), (5,) if with_bias else None, seed=4)
    fn = lambda x, w, r, b: out_proj_residual(x, w, r, b, p, seed=7, stats=stats)  # noqa: E731
    first = lambda *t: fn(*t)[0] if stats else fn(*t)  # noqa: E731
    assert torch.autograd.gradcheck(first, inputs)
    assert_matches(forward_backward(first, inputs),
                   forward_backward(lambda x, w, r, b: ref_out_proj(x, w, r, b, p, 7), upcast(inputs)), 1e-12)
    if stats:
        y, *sums = fn(*inputs)
        y = y.detach()
        torch.testing.assert_close(sums[0], (y * y).sum(-1), rtol=1e-12, atol=0)
        if stats == "layer":
            torch.testing.assert_close(sums[1], y.sum(-1), rtol=1e-12, atol=1e-12)
        assert not any(s.requires_grad for s in sums)


def rms_block(x, w1, residual, b1, g, w2):
    y, ss = out_proj_residual(x, w1, residual, b1, 0.3, seed=11, stats="rms")
    return rms_norm_linear(y, g, w2, 1e-6, sumsq=ss)


def ln_block(x, w1, residual, b1, g, beta, w2):
    y, ss, s = out_proj_residual(x, w1, residual, b1, 0.3, seed=11, stats="layer")
    return layer_norm_linear(y, g, beta, w2, rowsum=s, sumsq=ss)


def ref_rms_block(x, w1, residual, b1, g, w2):
    return ref_rms(ref_out_proj(x, w1, residual, b1, 0.3, 11), g, w2, 1e-6)


def ref_ln_block(x, w1, residual, b1, g, beta, w2):
    return ref_ln(ref_out_proj(x, w1, residual, b1, 0.3, 11), g, beta, w2)


@pytest.mark.parametrize("norm", ["rms", "layer"])
def test_out_proj_then_norm_linear_gradcheck(norm):
    """The statistics flow from the producer's epilogue into the next norm, undifferentiated; the
    gradients of the whole block are still exact (the consumer differentiates rstd(x))."""
    shapes = [(5, 6), (7, 6), (5, 7), (7,), (7,), (7,), (4, 7)]
    if norm == "rms":
        shapes.pop(5)  # no beta
    inputs = make(*shapes, seed=5, scale=0.7)
    block, ref_block = (rms_block, ref_rms_block) if norm == "rms" else (ln_block, ref_ln_block)
    assert torch.autograd.gradcheck(block, inputs)
    assert_matches(forward_backward(block, inputs), forward_backward(ref_block, upcast(inputs)), 1e-12)


def rms_as_ln(x, g, beta, w, b):
    return rms_norm_linear(x, g, w, 1e-6, b)


def ref_rms_as_ln(x, g, beta, w, b):
    return ref_rms(x, g, w, 1e-6, b)


@pytest.mark.parametrize(("wanted", "dtype", "tol"), [("weights", F64, 1e-12), ("input", F64, 1e-12),
                                                      ("weights", F32, TOL32), ("input", F32, TOL32)])
def test_gradients_of_some_inputs(wanted, dtype, tol):
    """Only the weights (the backward skips dx and makes xn / xhat with one map), or only x (no
    weight GEMM, and the dx map stores no xn / xhat). For RMSNorm beta is unused: no gradient.
    float64 on the reference backend, float32 through the interpreter."""
    which = [1, 2, 3, 4] if wanted == "weights" else [0]
    for fn, ref in ((rms_as_ln, ref_rms_as_ln), (layer_norm_linear, ref_ln)):
        inputs = [t.detach() for t in make((19, 24), (24,), (24,), (17, 24), (17,), dtype=dtype, seed=7)]
        inputs64 = upcast(inputs)
        for i in which:
            inputs[i].requires_grad_()
        y, y64 = fn(*inputs), ref(*inputs64)
        up = torch.randn(y.shape, generator=torch.Generator().manual_seed(1), dtype=F64)
        got = torch.autograd.grad(y, [inputs[i] for i in which], up.to(dtype), allow_unused=True)
        want = torch.autograd.grad(y64, [inputs64[i] for i in which], up, allow_unused=True)
        assert_matches((y, [a for a in got if a is not None]), (y64, [e for e in want if e is not None]), tol)
        assert [a is None for a in got] == [e is None for e in want]


# float32, the real kernels through the Triton interpreter -----------------------------------------
@pytest.mark.parametrize("given_stats", [False, True])
@pytest.mark.parametrize(("lead", "k", "n", "with_bias"), [((3, 7), 33, 47, True), ((16,), 96, 17, False)])
def test_rms_norm_linear_interpreter(lead, k, n, with_bias, given_stats, monkeypatch):
    """On the Triton backend, without the producer's sums: RMSNorm's one-pass forward, then the
    linear layer; with them, the norm folded into the GEMM, its backward RMSNorm's one pass
    between two plain GEMMs (not the fold's dxhat GEMM and dx map). Both match float64."""
    from coda.nn import layer_norm_forward, layer_norm_grad
    from coda.ops import norms

    passes = []
    for module, name in ((layer_norm_forward, "forward"), (layer_norm_grad, "backward")):
        monkeypatch.setattr(module, "launch", lambda *a, _launch=module.launch, _name=name, **k:
                            passes.append((_name, k.get("s"))) or _launch(*a, **k))
    monkeypatch.setattr(norms, "RMS_DXHAT", None)   # the fold's backward: not called here
    inputs = make((*lead, k), (k,), (n, k), (n,) if with_bias else None, dtype=F32, seed=8)
    inputs[2].data /= k**0.5

    def op(x, g, w, b):
        return rms_norm_linear(x, g, w, 1e-6, b, sumsq=(x * x).sum(-1).detach() if given_stats else None)

    got = forward_backward(op, inputs)
    want = forward_backward(lambda x, g, w, b: ref_rms(x, g, w, 1e-6, b), upcast(inputs))
    assert_matches(got, want, TOL32)
    # RMSNorm's kernels (no LayerNorm sum s); the forward's only without given sums
    assert passes == [("forward", None)] * (not given_stats) + [("backward", None)]


@pytest.mark.parametrize("given_stats", [False, True])
@pytest.mark.parametrize(("lead", "k", "n", "with_bias"), [((19,), 45, 64, True), ((2, 8), 32, 29, False)])
def test_layer_norm_linear_interpreter(lead, k, n, with_bias, given_stats, monkeypatch):
    """Without the producer's row sums the Triton backend runs LayerNorm's one-pass forward and
    then the linear layer; with them, the norm folded into the GEMM. Both match float64."""
    from coda.nn import layer_norm_forward

    passes = []
    monkeypatch.setattr(layer_norm_forward, "launch", lambda *a, _launch=layer_norm_forward.launch, **k:
                        passes.append(a[0].shape) or _launch(*a, **k))
    inputs = make((*lead, k), (k,), (k,), (n, k), (n,) if with_bias else None, dtype=F32, seed=9)
    inputs[3].data /= k**0.5

    def op(x, *rest):
        stats = dict(rowsum=x.sum(-1).detach(), sumsq=(x * x).sum(-1).detach()) if given_stats else {}
        return layer_norm_linear(x, *rest, **stats)

    got = forward_backward(op, inputs)
    want = forward_backward(ref_ln, upcast(inputs))
    assert_matches(got, want, TOL32)
    assert len(passes) == (0 if given_stats else 1)


@pytest.mark.parametrize("norm", ["rms", "layer", "layer with bias"])
@pytest.mark.parametrize(("dtype", "tol"), [(F64, 1e-12), (F32, TOL32)])   # reference, Triton kernels
def test_transposed_weight_gets_a_contiguous_gradient(norm, dtype, tol):
    """A weight stored [in, out] and passed as `.T` (HF's Conv1D: GPT-2's c_attn) gets its gradient
    in its own layout, so autograd hands the parameter that tensor without copying it into a
    [in, out] one (with a bias too, as GPT-2's c_attn has); the values as float64 autograd's."""
    from torch.utils._python_dispatch import TorchDispatchMode

    copied_into = []

    class Copies(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.aten.copy_.default:
                copied_into.append(tuple(args[0].shape))
            return func(*args, **(kwargs or {}))

    k, n = 40, 24
    x, g, beta = make((2, 9, k), (k,), (k,), dtype=dtype, seed=12)
    (stored_w,) = make((k, n), dtype=dtype, seed=13, scale=k ** -0.5)   # the parameter, [in, out]
    if norm == "rms":
        fns = (lambda x, g, w: rms_norm_linear(x, g, w.T, 1e-6), lambda x, g, w: ref_rms(x, g, w.T, 1e-6))
        inputs = [x, g, stored_w]
    elif norm == "layer":
        fns = (lambda x, g, b, w: layer_norm_linear(x, g, b, w.T), lambda x, g, b, w: ref_ln(x, g, b, w.T))
        inputs = [x, g, beta, stored_w]
    else:
        fns = (lambda x, g, b, w, c: layer_norm_linear(x, g, b, w.T, bias=c),
               lambda x, g, b, w, c: ref_ln(x, g, b, w.T, c))
        inputs = [x, g, beta, stored_w, *make((n,), dtype=dtype, seed=14)]
    y = fns[0](*inputs)
    with Copies():
        y.backward(torch.randn(y.shape, generator=torch.Generator().manual_seed(1), dtype=F64).to(dtype))
    assert (k, n) not in copied_into and stored_w.grad.is_contiguous()
    assert_matches((y, [t.grad for t in inputs]), forward_backward(fns[1], upcast(inputs)), tol)


@pytest.mark.parametrize("op", ["rms", "layer", "out_proj"])
def test_parameter_gradients_are_stored_in_their_dtype_without_casts(op):
    """float16 parameters: the kernels that sum g's, beta's and the bias's gradients store them
    in float16 (summed in float32), so the backward runs no cast after them (the Triton kernels
    here; the LayerNorm fold's map path, on the reference backend, casts the bias gradient that
    its weight-gradient GEMM reads in float32); the values match float64 to float16's resolution."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Casts(TorchDispatchMode):
        count = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.aten._to_copy.default and args[0].dim() == 1:
                Casts.count += 1
            return func(*args, **(kwargs or {}))

    k, n = 32, 48
    if op == "out_proj":
        inputs = make((24, k), (n, k), (24, n), (n,), dtype=torch.float16, seed=4)
        fns = (lambda x, w, r, b: out_proj_residual(x, w, r, b, stats=None),
               lambda x, w, r, b: ref_out_proj(x, w, r, b))
    elif op == "rms":
        inputs = make((24, k), (k,), (n, k), (n,), dtype=torch.float16, seed=5)
        fns = (lambda x, g, w, b: rms_norm_linear(x, g, w, 1e-6, b),
               lambda x, g, w, b: ref_rms(x, g, w, 1e-6, b))
    else:
        inputs = make((24, k), (k,), (k,), (n, k), (n,), dtype=torch.float16, seed=6)
        fns = (layer_norm_linear, ref_ln)
    y = fns[0](*inputs)
    upstream = torch.randn(y.shape, generator=torch.Generator().manual_seed(1), dtype=F64).to(y.dtype)
    with Casts():
        got = torch.autograd.grad(y, inputs, upstream)
    want = forward_backward(fns[1], upcast(inputs))[1]
    assert Casts.count == 0
    for grad, ref, t in zip(got, want, inputs, strict=True):
        assert grad.dtype == t.dtype == torch.float16
        assert rel(grad, ref) < 4e-3


@pytest.mark.parametrize("norm", ["rms", "layer"])
@pytest.mark.parametrize(("dtype", "tol"), [(F64, 1e-12), (F32, TOL32)])   # reference, Triton kernels
def test_passthrough_gives_x_whose_gradient_joins_the_norms(norm, dtype, tol, monkeypatch):
    """`passthrough=True` returns (y, x): a pre-norm block's residual read through it gets its
    gradient added in the op's dx kernel (RMS_DX[True]; LN_DX[True] on the reference backend,
    LayerNorm's one-pass backward on the Triton one); every gradient is the unfused block's, and
    a passed-through x that is used alone still gets its gradient."""
    from coda.nn import layer_norm_grad
    from coda.ops import norms

    x, g, beta, w, b, r = make((19, 33), (33,), (33,), (29, 33), (29,), (33, 29), dtype=dtype, seed=12)
    w.data /= 33**0.5
    if norm == "rms":
        inputs, programs = [x, g, w, b, r], norms.RMS_DX
        op = lambda x, g, w, b: rms_norm_linear(x, g, w, 1e-6, b, passthrough=True)  # noqa: E731
        ref = lambda x, g, w, b, r: ref_rms(x, g, w, 1e-6, b) + x @ r  # noqa: E731
    else:
        inputs, programs = [x, g, beta, w, b, r], norms.LN_DX
        op = lambda *t: layer_norm_linear(*t, passthrough=True)  # noqa: E731
        ref = lambda x, g, beta, w, b, r: ref_ln(x, g, beta, w, b) + x @ r  # noqa: E731
    used = []
    for res, prog in programs.items():   # record which dx kernel runs, and whether with dres
        monkeypatch.setattr(prog, "map", lambda *a, _map=prog.map, _res=res, **k:
                            used.append(_res) or _map(*a, **k))
    monkeypatch.setattr(layer_norm_grad, "launch", lambda *a, _launch=layer_norm_grad.launch, **k:
                        used.append(k["dres"] is not None) or _launch(*a, **k))

    def block(*t):
        y, passed = op(*t[:-1])
        assert torch.equal(passed, t[0])
        return y + passed @ t[-1]   # x read twice: by the norm and as the residual

    assert_matches(forward_backward(block, inputs), forward_backward(ref, upcast(inputs)), tol)
    assert used == [True]
    alone = torch.autograd.grad((op(*inputs[:-1])[1] * 3).sum(), x)[0]
    torch.testing.assert_close(alone, torch.full_like(x, 3.0))


@pytest.mark.parametrize("op", ["rms_norm_linear", "layer_norm_linear", "out_proj_residual", "linear"])
def test_float64_parameters_beside_float32_activations(op):
    """g, beta and bias may be float64 beside float32 activations (docs/ops.md): on the Triton
    backend their gradients, summed in float32 as every reduction is, are stored in float64 by
    the finishing kernel (the launch once refused float64 outputs, after the forward had run)."""
    from coda.ops import linear

    m, k, n = 13, 40, 24
    x, w, residual = make((m, k), (n, k), (m, n), dtype=F32, seed=11)
    g, beta, b = make((k,), (k,), (n,), dtype=F64, seed=12)
    w.data /= k**0.5
    fn, ref, inputs = {
        "rms_norm_linear": (lambda x, w, g, b: rms_norm_linear(x, g, w, 1e-6, b),
                            lambda x, w, g, b: ref_rms(x, g, w, 1e-6, b), [x, w, g, b]),
        "layer_norm_linear": (lambda x, w, g, beta, b: layer_norm_linear(x, g, beta, w, b),
                              lambda x, w, g, beta, b: ref_ln(x, g, beta, w, b), [x, w, g, beta, b]),
        "out_proj_residual": (lambda x, w, r, b: out_proj_residual(x, w, r, b, stats=None),
                              ref_out_proj, [x, w, residual, b]),
        "linear": (lambda x, w, b: linear(x, w, b), lambda x, w, b: x @ w.T + b, [x, w, b]),
    }[op]
    got = forward_backward(fn, inputs)
    assert [t.dtype for t in got[1]] == [t.dtype for t in inputs]
    assert_matches(got, forward_backward(ref, upcast(inputs)), TOL32)


def test_out_proj_into_norms_interpreter():
    """The fused block at float32: out projection (+ dropout, + residual, statistics) feeding both
    norms, and the statistics themselves."""
    inputs = make((23, 40), (36, 40), (23, 36), (36,), (36,), (36,), (17, 36), dtype=F32, seed=10, scale=0.5)

    def block(x, w1, residual, b1, g, beta, w2):
        y, ss, s = out_proj_residual(x, w1, residual, b1, 0.25, seed=3, stats="layer")
        return torch.cat([rms_norm_linear(y, g, w2, 1e-6, sumsq=ss),
                          layer_norm_linear(y, g, beta, w2, rowsum=s, sumsq=ss)], -1)

    def ref_block(x, w1, residual, b1, g, beta, w2):
        y = ref_out_proj(x, w1, residual, b1, 0.25, 3)
        return torch.cat([ref_rms(y, g, w2, 1e-6), ref_ln(y, g, beta, w2)], -1)

    assert_matches(forward_backward(block, inputs), forward_backward(ref_block, upcast(inputs)), TOL32)
    _, ss, s = out_proj_residual(*inputs[:4], 0.25, seed=3, stats="layer")
    y64 = ref_out_proj(*upcast(inputs[:4]), 0.25, 3).detach()
    torch.testing.assert_close(ss.to(F64), (y64 * y64).sum(-1), rtol=TOL32, atol=0)
    torch.testing.assert_close(s.to(F64), y64.sum(-1), rtol=TOL32, atol=TOL32 * y64.abs().sum().item())


def test_rms_norm_linear_interpreter_expanded_upstream_gradient():
    """`y.sum().backward()` hands the op a stride-0 gradient; the kernels take any strides."""
    x, g, w = make((17, 24), (24,), (20, 24), dtype=F32, seed=11, scale=0.5)
    rms_norm_linear(x, g, w).sum().backward()
    x64, g64, w64 = upcast((x, g, w))
    ref_rms(x64, g64, w64, 1e-6).sum().backward()
    for got, want in ((x.grad, x64.grad), (g.grad, g64.grad), (w.grad, w64.grad)):
        torch.testing.assert_close(got.to(F64), want, rtol=TOL32, atol=TOL32 * want.abs().max().item())


@pytest.mark.parametrize("norm", ["rms", "ln"])
@pytest.mark.parametrize("given_stats", [False, True])
def test_strided_norm_vectors_and_row_sums(norm, given_stats):
    """Every [K] and [M] vector may be a strided view (every other element of a buffer): the
    one-pass norm kernels, forward and backward, read g, beta and the row sums by their
    strides (they had read them as dense, a silently wrong answer)."""
    x, g, beta, w = make((17, 24), (48,), (48,), (20, 24), dtype=F32, seed=12, scale=0.5)
    xd = x.detach()
    sums = torch.stack([xd.sum(-1), (xd * xd).sum(-1), torch.zeros(17)], 1)   # columns of stride 3
    stats = dict(rowsum=sums[:, 0], sumsq=sums[:, 1]) if given_stats else {}
    if norm == "rms":
        stats.pop("rowsum", None)
        inputs = [x, g, w]
        got = forward_backward(lambda x, g, w: rms_norm_linear(x, g[::2], w, 1e-6, **stats), inputs)
        want = forward_backward(lambda x, g, w: ref_rms(x, g[::2], w, 1e-6), upcast(inputs))
    else:
        inputs = [x, g, beta, w]
        got = forward_backward(lambda x, g, b, w: layer_norm_linear(x, g[::2], b[::2], w, **stats), inputs)
        want = forward_backward(lambda x, g, b, w: ref_ln(x, g[::2], b[::2], w), upcast(inputs))
    assert g[::2].stride() == (2,) and sums[:, 1].stride() == (3,)
    assert_matches(got, want, TOL32)


def test_layer_norm_statistics_with_a_large_mean():
    """Activations with mean 100 and std 1 at float32 (interpreter), numbers in docs/ops/norms.md.
    The shifted one-pass sums (x - x[:, 0]) leave only the fold's own cancellation (x @ W'.T is
    about |mean| / std times larger than the result: ~1e-5 here, torch ~3e-6); raw sums from a
    producer (var = E[x²] - mean²) lose far more (~5e-4)."""
    x, g, beta, w = make((64, 96), (96,), (96,), (48, 96), dtype=F32, seed=12)
    x = (x.detach() + 100.0).requires_grad_()
    w.data /= 96**0.5
    inputs = [x, g, beta, w]
    want = ref_ln(*upcast(inputs))
    torch_err = rel(torch.nn.functional.layer_norm(x, (96,), g, beta, 1e-5) @ w.T, want)
    shifted_err = rel(layer_norm_linear(*inputs), want)
    raw = dict(rowsum=x.sum(-1).detach(), sumsq=(x * x).sum(-1).detach())
    raw_err = rel(layer_norm_linear(*inputs, **raw), want)
    print(f"mean 100, std 1, float32: torch {torch_err:.2e}, shifted {shifted_err:.2e}, raw {raw_err:.2e}")
    assert shifted_err < 5e-5
    assert raw_err > 10 * shifted_err   # the measured reason for the shift
    # and the backward, with the shifted statistics
    assert_matches(forward_backward(layer_norm_linear, inputs), forward_backward(ref_ln, upcast(inputs)),
                   1e-4)


def test_layer_norm_fold_sums_the_weights_as_the_gemm_reads_them():
    """float16 weights and a mean of 100 (interpreter): the forward GEMM reads W' = w * g rounded
    to float16, and u = Σ_k W' must sum those rounded values (FOLD_LN's round_fp16), or mean * u
    leaves about 2^-11 |mean| / std of error (docs/ops.md); held to twice eager float16's error
    against float64 of the same inputs."""
    x, g, beta, w = make((64, 96), (96,), (96,), (48, 96), dtype=F32, seed=14)
    x, g, beta, w = (t.detach().half() for t in (x + 100.0, g, beta, w / 96**0.5))
    want = ref_ln(*upcast([x, g, beta, w]))
    eager = torch.nn.functional.layer_norm(x, (96,), g, beta, 1e-5) @ w.T
    got = layer_norm_linear(x, g, beta, w)
    assert got.dtype == torch.float16
    assert rel(got, want) <= 2 * rel(eager, want)


@pytest.mark.parametrize("norm", ["rms", "layer"])
def test_chained_norm_float16_error_at_most_twice_eager(norm):
    """float16 (interpreter), out_proj_residual's statistics into the next norm: RMSNorm rows whose
    few massive channels (1000x the rest) hold most of Σ y², so that the rounding of those
    channels moves the sum by a share of 2^-11 that every row's rstd, and so the gain's gradient,
    carries alike (2.5x eager's error in dg when the sums were of the float32 y); LayerNorm rows
    of mean 100 (the mean's share of that difference cancels in E[y²] - mean²). The block's
    output and every gradient are held to twice eager float16's error against float64 of the
    same inputs."""
    k, n, out = 48, 64, 40
    x, w, residual, g, beta, w2 = make((67, k), (n, k), (67, n), (n,), (n,), (out, n), dtype=F32, seed=0)
    w, w2 = w / k**0.5, w2 / n**0.5
    if norm == "layer":
        residual = residual + 100.0
    else:
        residual = residual * torch.where(torch.arange(n) < 3, 1000.0, 1.0)
    inputs = [t.detach().half().requires_grad_() for t in (x, w, residual, g, beta, w2)]
    if norm == "rms":
        del inputs[4]   # no beta

    def block(x, w, residual, g, *rest):
        if norm == "rms":
            y, ss = out_proj_residual(x, w, residual, stats="rms")
            return rms_norm_linear(y, g, rest[-1], 1e-6, sumsq=ss)
        y, ss, s = out_proj_residual(x, w, residual, stats="layer")
        return layer_norm_linear(y, g, *rest, rowsum=s, sumsq=ss)

    def eager(x, w, residual, g, *rest):
        y = x @ w.T + residual
        if norm == "rms":
            y = torch.nn.functional.rms_norm(y, (n,), g, 1e-6)
        else:
            y = torch.nn.functional.layer_norm(y, (n,), g, rest[0], 1e-5)
        return y @ rest[-1].T

    want = forward_backward(eager, upcast(inputs))
    got, base = forward_backward(block, inputs), forward_backward(eager, inputs)
    outputs = zip((got[0], *got[1]), (base[0], *base[1]), (want[0], *want[1]), strict=True)
    for i, (a, b, e) in enumerate(outputs):
        assert rel(a, e) <= 2 * rel(b, e), (i, rel(a, e), rel(b, e))


# errors -------------------------------------------------------------------------------------------
def test_errors_name_the_argument():
    x, g, w, b, r = (t.detach() for t in make((4, 8), (8,), (6, 8), (6,), (4, 6), seed=13))
    cases = [
        (lambda: rms_norm_linear(x, g, w[:, :5]), "w must be"),
        (lambda: rms_norm_linear(x, g, w.float()), "w has dtype"),
        (lambda: rms_norm_linear(x.long(), g, w), "x has dtype"),
        (lambda: rms_norm_linear(x[0, 0], g, w), "x must be"),
        (lambda: rms_norm_linear(x, g[:5], w), "g must have shape"),
        (lambda: rms_norm_linear(x, g, w, bias=b[:5]), "bias must have shape"),
        (lambda: rms_norm_linear(x, g, w, sumsq=torch.ones(5, dtype=F64)), "sumsq must have"),
        (lambda: rms_norm_linear(x, g, w, eps=-1.0), "eps"),
        (lambda: rms_norm_linear(x, "g", w), "g must be a torch.Tensor"),
        (lambda: layer_norm_linear(x, g, g[:3], w), "beta must have shape"),
        (lambda: layer_norm_linear(x, g, g, w, rowsum=torch.ones(4, dtype=F64)), "sumsq is missing"),
        (lambda: layer_norm_linear(x, g, g, w, rowsum=torch.ones(3, dtype=F64),
                                   sumsq=torch.ones(4, dtype=F64)), "rowsum must have"),
        (lambda: out_proj_residual(x, w, r[:, :5]), "residual must have shape"),
        (lambda: out_proj_residual(x, w, r, stats="group"), "stats must be"),
        (lambda: out_proj_residual(x, w, r, dropout_p=1.5), "dropout_p"),
        (lambda: out_proj_residual(x, w, r, dropout_p=0.1, seed=1.5), "seed"),
        (lambda: out_proj_residual(x, w, r.long()), "residual has dtype"),
    ]
    for fn, words in cases:
        with pytest.raises(coda.LaunchError, match=words):
            fn()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_row_sums_of_16_bits_are_refused(dtype):
    """Every op that takes a producer's row sums refuses them in 16 bits (FSDP2's mixed-precision
    policy casts a sharded module's inputs, the sums with them): a LayerNorm's variance from
    bf16 sums had 10x the error of its own statistics (rows of mean 8), and nothing said so."""
    from coda.nn import layer_norm, rms_norm
    from coda.ops import qkv_rope, swiglu_mlp
    from coda.ops.gated_mlp import interleave
    x = torch.randn(4, 8, dtype=torch.float32) + 8
    g, w = torch.ones(8), torch.randn(6, 8)
    s, ss = x.sum(-1).to(dtype), x.square().sum(-1).to(dtype)
    cos, sin = torch.ones(4, 1), torch.zeros(4, 1)
    calls = [lambda: rms_norm_linear(x, g, w, sumsq=ss),
             lambda: layer_norm_linear(x, g, g, w, rowsum=s, sumsq=ss),
             lambda: rms_norm(x, g, sumsq=ss), lambda: layer_norm(x, g, g, rowsum=s, sumsq=ss),
             lambda: swiglu_mlp(x, interleave(w, w), torch.randn(8, 6), sumsq=ss),
             lambda: qkv_rope(x[None], torch.randn(16, 8), cos, sin, 2, 1, 4, norm_weight=g, sumsq=ss[None])]
    for call in calls:
        with pytest.raises(coda.LaunchError, match=f"has dtype {dtype}; a row sum must be float32"):
            call()


def test_out_proj_residual_draws_and_keeps_a_seed():
    """Without a seed, one is drawn from torch's CPU generator, and the backward reuses it."""
    inputs = make((9, 6), (5, 6), (9, 5), seed=14)
    torch.manual_seed(0)
    got = forward_backward(lambda x, w, r: out_proj_residual(x, w, r, dropout_p=0.5, stats=None), inputs)
    torch.manual_seed(0)
    seed = int(torch.randint(2**31, ()).item())
    want = forward_backward(lambda x, w, r: ref_out_proj(x, w, r, None, 0.5, seed), upcast(inputs))
    assert_matches(got, want, 1e-12)


def test_out_proj_residual_row_sums_get_no_zero_gradients():
    x, w, residual = make((3, 5, 8), (8, 8), (3, 5, 8), seed=21)
    y, _, _ = out_proj_residual(x, w, residual, stats="layer")
    assert zero_fills(lambda: y.sum().backward()) == 0
    xr, wr, rr = (t.detach().requires_grad_() for t in (x, w, residual))
    (xr @ wr.T + rr).sum().backward()
    for got, want in ((x.grad, xr.grad), (w.grad, wr.grad), (residual.grad, rr.grad)):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
