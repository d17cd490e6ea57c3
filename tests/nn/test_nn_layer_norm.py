"""coda.nn.layer_norm (LayerNorm as CODA map programs) against the plain formula.

- float64, reference backend: gradcheck, and the forward and gradients against autograd of the
  formula written here, with the row sums computed by the op or given by a producer;
- float32 through the Triton interpreter (the real kernels) at odd shapes;
- argument errors.
"""

from __future__ import annotations

import importlib

import pytest
import torch

import coda
from coda.nn import layer_norm, rms_norm
from coda.ops.norms import out_proj_residual

F64 = torch.float64


def ref_layer_norm(x, g, beta, eps=1e-5):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * g + beta


def inputs(shape, dtype=F64, offset=3.0, seed=0):
    gen = torch.Generator().manual_seed(seed)
    n = shape[-1]
    x = torch.randn(*shape, generator=gen, dtype=dtype) + offset   # |mean| > std
    g = 1.0 + 0.5 * torch.randn(n, generator=gen, dtype=dtype)
    beta = torch.randn(n, generator=gen, dtype=dtype)
    return x, g, beta


def grads(fn, *tensors):
    tensors = [t.detach().clone().requires_grad_() for t in tensors]
    y = fn(*tensors)
    dy = torch.linspace(-1.0, 1.0, y.numel(), dtype=y.dtype).reshape(y.shape)
    (y * dy).sum().backward()
    return y.detach(), [t.grad for t in tensors]


def test_gradcheck_float64():
    x, g, beta = inputs((2, 3, 7))
    args = [t.requires_grad_() for t in (x, g, beta)]
    assert torch.autograd.gradcheck(lambda *a: layer_norm(*a), args)


@pytest.mark.parametrize("given_sums", [False, True])
def test_matches_formula_float64(given_sums):
    x, g, beta = inputs((3, 5, 24))

    def coda_ln(x, g, beta):
        if not given_sums:
            return layer_norm(x, g, beta)
        xd = x.detach()   # the producer's statistics of this x: not differentiated
        return layer_norm(x, g, beta, rowsum=xd.sum(-1), sumsq=(xd * xd).sum(-1))

    y, dgrads = grads(coda_ln, x, g, beta)
    y_ref, ref_grads = grads(ref_layer_norm, x, g, beta)
    torch.testing.assert_close(y, y_ref, rtol=1e-12, atol=1e-12)
    for got, want in zip(dgrads, ref_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)


def test_statistics_from_out_proj_residual():
    """out_proj_residual(stats="layer") -> layer_norm(rowsum, sumsq): the composition is exact."""
    gen = torch.Generator().manual_seed(1)
    a, w, res = (torch.randn(*s, generator=gen, dtype=F64) for s in ((9, 16), (12, 16), (9, 12)))
    _, g, beta = inputs((1, 12))

    def fused(a, w, res, g, beta):
        y, ss, s = out_proj_residual(a, w, res, stats="layer")
        return layer_norm(y, g, beta, rowsum=s, sumsq=ss)

    got, got_grads = grads(fused, a, w, res, g, beta)
    want, want_grads = grads(lambda a, w, res, g, beta: ref_layer_norm(res + a @ w.T, g, beta),
                             a, w, res, g, beta)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    for x, y in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(x, y, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("shape", [(37, 50), (2, 17, 96)])
def test_interpreter_float32(shape):
    """On a CPU machine conftest.py switches the interpreter on: the real kernels run."""
    x, g, beta = inputs(shape)
    y, dgrads = grads(layer_norm, *(t.float() for t in (x, g, beta)))
    y_ref, ref_grads = grads(ref_layer_norm, x, g, beta)
    # float32 epilogue math and one rounding per output: ~1e-7. dbeta sums M terms of dy whose
    # signs cancel, so its relative error is larger (1.4e-6 measured).
    for got, want in zip([y, *dgrads], [y_ref, *ref_grads], strict=True):
        assert (got.double() - want).norm() / want.norm() < 1e-5


@pytest.mark.parametrize("dtype", [F64, torch.float32])   # reference backend, Triton kernels
def test_passthrough_residual_gradient_joins_dx(dtype, monkeypatch):
    """layer_norm(..., passthrough=True) -> (y, x): the gradient of the passed-through x (a
    residual) is added where dx is formed (the reference's LN_GRAD_DX[True] map, the Triton
    backend's one-pass kernel); the block's gradients are the formula's."""
    module = importlib.import_module("coda.nn.layer_norm")   # coda.nn.layer_norm is the function

    used = []
    for res, prog in module.LN_GRAD_DX.items():
        monkeypatch.setattr(prog, "map", lambda *a, _map=prog.map, _res=res, **k:
                            used.append(_res) or _map(*a, **k))
    if dtype != F64:
        one_pass = importlib.import_module("coda.nn.layer_norm_grad")
        monkeypatch.setattr(one_pass, "launch", lambda *a, _launch=one_pass.launch, **k:
                            used.append(k["dres"] is not None) or _launch(*a, **k))
    x, g, beta = (t.to(dtype) for t in inputs((2, 9, 40)))
    mix = torch.randn(40, 40, generator=torch.Generator().manual_seed(3), dtype=dtype)

    def block(x, g, beta):
        y, passed = layer_norm(x, g, beta, passthrough=True)
        return y @ mix + passed * 2.0   # the residual read through the passed-through x

    got, got_grads = grads(block, x, g, beta)
    want, want_grads = grads(lambda x, g, beta: ref_layer_norm(x, g, beta) @ mix.double() + x * 2.0,
                             *(t.double() for t in (x, g, beta)))
    tol = 1e-10 if dtype == F64 else 1e-5
    for a, b in zip([got, *got_grads], [want, *want_grads], strict=True):
        assert (a.double() - b).norm() / b.norm() < tol
    assert used == [True]


def ref_rms_norm(x, g, eps=1e-5):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * g


def row_operands(norm: str, x: torch.Tensor) -> dict:
    """The row statistics the one-pass kernels read, float32: LayerNorm's sums shifted by each
    row's first value (LN_ROW), RMSNorm's Σ x² (RMS_ROW)."""
    if norm == "rms":
        return dict(ss=(x * x).sum(1).float())
    shift = x[:, 0] if x.shape[0] else x.new_zeros(0)
    d = x - shift[:, None]
    return dict(shift=shift.float(), s=d.sum(1).float(), ss=(d * d).sum(1).float())


@pytest.mark.parametrize("shape, choice", [((70, 48), None), ((33, 200), (4, 4, 3, 2)),
                                           ((21, 600), (4, 4, 3, 2)), ((13, 520), None),
                                           ((6, 2100), (1, 8, 3, 1)), ((33, 200), (2, 2, 3, 0)),
                                           ((7, 2100), (1, 8, 2, 0)),
                                           ((9, 24), (1, 4, 20, 1)), ((0, 16), None)])
@pytest.mark.parametrize("needs", [(True, True, True), (True, False, False), (False, True, True)])
@pytest.mark.parametrize("norm", ["layer", "rms"])
def test_one_pass_backward_float32(norm, shape, choice, needs):
    """coda.nn.layer_norm_grad (the Triton backend's backward of LayerNorm, and of RMSNorm where
    no `s` is given) in the interpreter, against float64 autograd: row blocks that leave a
    partial block, more programs than row blocks (9 rows in 20 programs), rows in column chunks
    of a warp's width (600 = 256 + 256 + 88 with a row a warp of four, 520 in the default
    one-warp programs) or whole (2100 over eight warps), each with the next row block loaded
    ahead in registers (STAGES = 0, the default up to 768 columns) or through Triton's
    pipeline, no rows at all, and each subset of the gradients it may be asked for; with dx,
    also the norm's output (`save_xn`: what layer_norm_linear's and rms_norm_linear's weight
    gradients read) and dx's column sums (`sum_dx=True`: a bias gradient further back), which
    are those of the dx it stored; widths that are not a power of two, where dx past N is not
    zero in the kernel."""
    one_pass = importlib.import_module("coda.nn.layer_norm_grad")
    x, g, beta = inputs(shape, seed=4)
    gen = torch.Generator().manual_seed(5)
    dy, dres = (torch.randn(shape, generator=gen, dtype=F64) for _ in range(2))
    need_x, need_g, need_beta = needs
    rms = norm == "rms"
    need_beta = need_beta and not rms
    got = one_pass.launch(dy.float(), x.float(), g.float(), **row_operands(norm, x), inv_n=1.0 / shape[1],
                          eps=1e-5, dres=dres.float() if need_x else None, need_dx=need_x,
                          param_dtypes=(torch.float32, torch.float32) if need_g else None, choice=choice,
                          save_xn=need_x, beta=None if rms else beta.float(), sum_dx=torch.float32)
    xr, gr, br = (t.clone().requires_grad_() for t in (x, g, beta))
    normed = ref_rms_norm(xr, gr) if rms else ref_layer_norm(xr, gr, br)
    normed.backward(dy)
    want = (xr.grad + dres, gr.grad, br.grad, normed.detach(), (xr.grad + dres).sum(0))
    if need_x and shape[0]:   # the sums of the values stored, to float32's rounding of a sum
        torch.testing.assert_close(got[4].double(), got[0].double().sum(0), rtol=1e-6, atol=1e-5)
    for have, expect, needed in zip(got, want, (need_x, need_g, need_beta, need_x, need_x), strict=True):
        if not needed:
            assert have is None
        elif shape[0] == 0:
            assert have.shape == expect.shape and not have.abs().sum()
        else:
            assert (have.double() - expect).norm() / expect.norm() < 1e-5


@pytest.mark.parametrize("norm", ["layer", "rms"])
def test_one_pass_backward_takes_float16_sums(norm):
    """A caller's float16 sums (rms_norm(x, g, sumsq=...) checks only that they are floating
    point) are read as float32: the gradients equal those from the same values given in
    float32, where the interpreter used to stop at rsqrt of a float16."""
    one_pass = importlib.import_module("coda.nn.layer_norm_grad")
    x, g, beta = (t.float() for t in inputs((9, 24), seed=6))
    dy = torch.randn(9, 24, generator=torch.Generator().manual_seed(7))
    half = {k: v.half() for k, v in row_operands(norm, x).items()}
    beta = None if norm == "rms" else beta
    got, want = (one_pass.launch(dy, x, g, **sums, inv_n=1.0 / 24, eps=1e-5, dres=None, need_dx=True,
                                 param_dtypes=(torch.float32,) * 2, beta=beta)
                 for sums in (half, {k: v.float() for k, v in half.items()}))
    for have, expect in zip(got, want, strict=True):
        if expect is not None:
            torch.testing.assert_close(have, expect, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("shape", [(70, 48), (33, 200), (0, 16)])
@pytest.mark.parametrize("norm", ["layer", "rms"])
def test_one_pass_forward_float32(norm, shape):
    """coda.nn.layer_norm_forward (the Triton backend's forward without given sums, of LayerNorm
    and of RMSNorm where no beta is given) in the interpreter: y against the float64 formula,
    and the row sums the backward reads: LayerNorm's shifted by each row's first value (|mean| >
    std, so unshifted sums would cancel), RMSNorm's Σ x²."""
    one_pass = importlib.import_module("coda.nn.layer_norm_forward")
    x, g, beta = inputs(shape, seed=6, offset=30.0)
    rms = norm == "rms"
    y, s, ss = one_pass.launch(x.float(), g.float(), None if rms else beta.float(), 1e-5)
    sums = row_operands(norm, x)
    assert (s is None) == rms
    for got, want in ((y, ref_rms_norm(x, g) if rms else ref_layer_norm(x, g, beta)),
                      (ss, sums["ss"]), *(() if rms else ((s, sums["s"]),))):
        assert got.shape == want.shape
        if shape[0]:
            assert (got.double() - want.double()).norm() / want.double().norm() < 1e-5


def test_forward_without_sums_is_one_kernel(monkeypatch):
    """On the Triton backend a norm whose producer gave no sums runs the one-pass forward, not the
    sums map and the norm map; given sums still take the norm map alone."""
    module = importlib.import_module("coda.nn.layer_norm")
    maps = []
    for prog in (module.LN_STATS, module.LAYER_NORM):
        monkeypatch.setattr(prog, "map", lambda *a, _map=prog.map, _name=prog.name, **k:
                            maps.append(_name) or _map(*a, **k))
    x, g, beta = (t.float() for t in inputs((9, 40)))
    layer_norm(x, g, beta)
    assert maps == []
    layer_norm(x, g, beta, rowsum=x.sum(-1), sumsq=(x * x).sum(-1))
    assert maps == ["layer_norm"]


def test_errors_name_the_argument():
    x, g, beta = inputs((4, 8))
    with pytest.raises(coda.LaunchError, match="passthrough must be True or False"):
        layer_norm(x, g, beta, passthrough=1)
    with pytest.raises(coda.LaunchError, match="x must be a floating-point tensor"):
        layer_norm(x.long(), g, beta)
    with pytest.raises(coda.LaunchError, match="beta"):
        layer_norm(x, g, beta[:5])
    with pytest.raises(coda.LaunchError, match="rowsum and sumsq"):
        layer_norm(x, g, beta, rowsum=x.sum(-1))
    with pytest.raises(coda.LaunchError, match="sumsq"):
        layer_norm(x, g, beta, rowsum=x.sum(-1), sumsq=x.sum(-1)[:2])
    # integer parameters or sums: refused by name on every path (the one-pass kernel read an
    # integer gain, the maps refused it as their operand)
    with pytest.raises(coda.LaunchError, match=r"layer_norm: g has dtype torch\.int64"):
        layer_norm(x, torch.ones(8, dtype=torch.long), beta)
    with pytest.raises(coda.LaunchError, match=r"layer_norm: rowsum has dtype torch\.int64"):
        layer_norm(x, g, beta, rowsum=torch.ones(4, dtype=torch.long), sumsq=x.sum(-1))
    with pytest.raises(coda.LaunchError, match=r"rms_norm: g has dtype torch\.int32"):
        rms_norm(x, torch.ones(8, dtype=torch.int32))


# RMSNorm: coda.nn.rms_norm -------------------------------------------------------------------------
def test_rms_norm_gradcheck_float64():
    x, g, _ = inputs((2, 3, 7))
    args = [x.requires_grad_(), g.requires_grad_()]
    assert torch.autograd.gradcheck(lambda x, g: rms_norm(x, g, 1e-5), args)


@pytest.mark.parametrize("given_sums", [False, True])
@pytest.mark.parametrize("dtype", [F64, torch.float32])   # reference backend's maps, Triton kernels
def test_rms_norm_matches_formula(dtype, given_sums, monkeypatch):
    """y and both gradients against float64 autograd of the formula. On the Triton backend
    (float32, the interpreter) the forward is the one-pass kernel alone, or with the producer's
    sums the RMS_NORM map alone; the reference backend runs the maps."""
    module = importlib.import_module("coda.nn.layer_norm")
    one_pass = importlib.import_module("coda.nn.layer_norm_forward")
    ran = []
    for prog in (module.RMS_STATS, module.RMS_NORM):
        monkeypatch.setattr(prog, "map", lambda *a, _map=prog.map, _name=prog.name, **k:
                            ran.append(_name) or _map(*a, **k))
    monkeypatch.setattr(one_pass, "launch", lambda *a, _launch=one_pass.launch, **k:
                        ran.append("one pass") or _launch(*a, **k))
    x, g, _ = (t.to(dtype) for t in inputs((3, 5, 24)))

    def coda_rms(x, g):   # given sums: the producer's statistics of this x, not differentiated
        return rms_norm(x, g, 1e-5, sumsq=(x.detach() ** 2).sum(-1) if given_sums else None)

    got, got_grads = grads(coda_rms, x, g)
    want, want_grads = grads(ref_rms_norm, x.double(), g.double())
    tol = 1e-12 if dtype == F64 else 1e-5
    for a, b in zip([got, *got_grads], [want, *want_grads], strict=True):
        assert (a.double() - b).norm() / b.norm() < tol
    if given_sums:
        assert ran == ["rms_norm"]
    else:
        assert ran == (["rms_stats", "rms_norm"] if dtype == F64 else ["one pass"])


@pytest.mark.parametrize("dtype", [F64, torch.float32])   # reference backend, Triton kernels
def test_rms_norm_passthrough_residual_gradient_joins_dx(dtype, monkeypatch):
    """rms_norm(..., passthrough=True) -> (y, x): the passed-through x's gradient is added where dx
    is formed (RMS_GRAD_DX[True] on the reference backend, the one-pass kernel on the Triton one)."""
    module = importlib.import_module("coda.nn.layer_norm")
    one_pass = importlib.import_module("coda.nn.layer_norm_grad")
    used = []
    for res, prog in module.RMS_GRAD_DX.items():
        monkeypatch.setattr(prog, "map", lambda *a, _map=prog.map, _res=res, **k:
                            used.append(_res) or _map(*a, **k))
    monkeypatch.setattr(one_pass, "launch", lambda *a, _launch=one_pass.launch, **k:
                        used.append(k["dres"] is not None) or _launch(*a, **k))
    x, g, _ = (t.to(dtype) for t in inputs((2, 9, 40)))
    mix = torch.randn(40, 40, generator=torch.Generator().manual_seed(3), dtype=dtype)

    def block(x, g):
        y, passed = rms_norm(x, g, passthrough=True)
        return y @ mix + passed * 2.0

    got, got_grads = grads(block, x, g)
    want, want_grads = grads(lambda x, g: ref_rms_norm(x, g, 1e-6) @ mix.double() + x * 2.0, x.double(),
                             g.double())
    tol = 1e-10 if dtype == F64 else 1e-5
    for a, b in zip([got, *got_grads], [want, *want_grads], strict=True):
        assert (a.double() - b).norm() / b.norm() < tol
    assert used == [True]


def test_rms_norm_errors_name_the_argument():
    x, g, _ = inputs((4, 8))
    with pytest.raises(coda.LaunchError, match="rms_norm: x must be a floating-point tensor"):
        rms_norm(x.long(), g)
    with pytest.raises(coda.LaunchError, match=r"rms_norm: g must be a tensor of shape \[8\]"):
        rms_norm(x, g[:5])
    with pytest.raises(coda.LaunchError, match=r"rms_norm: sumsq must be a tensor of shape \[4\]"):
        rms_norm(x, g, sumsq=x.sum(-1)[:2])
