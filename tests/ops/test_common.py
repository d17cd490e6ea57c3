"""coda.ops.common: the plain GEMM and the weight gradient, also accumulated into a buffer."""

from __future__ import annotations

import pytest
import torch

from coda.ops.common import matmul, weight_grad


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_matmul_and_weight_grad_match_float64(dtype):
    torch.manual_seed(0)
    dy, x, w = (torch.randn(*shape).to(dtype) for shape in ((37, 24), (37, 16), (24, 16)))
    tol = 1e-5 if dtype == torch.float32 else 2e-3
    torch.testing.assert_close(matmul(dy, w).double(), dy.double() @ w.double(), rtol=tol, atol=tol * 4)
    torch.testing.assert_close(weight_grad(dy, x).double(), dy.double().T @ x.double(), rtol=tol,
                               atol=tol * 4)


@pytest.mark.parametrize("into_dtype", [torch.float16, torch.float32])
def test_weight_grad_accumulates_into_a_buffer(into_dtype):
    """`into` of the activations' dtype (cuBLAS, beta = 1) or float32 (a CODA `output +=` GEMM)."""
    torch.manual_seed(1)
    dy, x = torch.randn(40, 24).half(), torch.randn(40, 16).half()
    start = torch.randn(24, 16).to(into_dtype)
    into = start.clone()
    got = weight_grad(dy, x, into=into)
    assert got.data_ptr() == into.data_ptr() and got.dtype == into_dtype
    exact = start.double() + dy.double().T @ x.double()
    tol = 2e-3 if into_dtype == torch.float16 else 1e-5
    torch.testing.assert_close(into.double(), exact, rtol=tol, atol=tol * 8)


def test_weight_grad_takes_a_transposed_weights_layout():
    """HF's Conv1D weights are [in, out], passed as `weight.T`: their gradient comes back as a
    transposed view whose transpose (what autograd hands the parameter) is contiguous, so no
    copy follows; an nn.Linear weight keeps a contiguous [out, in] gradient."""
    g = torch.Generator().manual_seed(4)
    dy, x = torch.randn(64, 24, generator=g), torch.randn(64, 40, generator=g)
    conv1d = torch.randn(40, 24, generator=g)   # [in, out]
    got = weight_grad(dy, x, like=conv1d.T)
    assert got.shape == (24, 40) and got.T.is_contiguous()
    torch.testing.assert_close(got.double(), dy.double().T @ x.double(), rtol=1e-5, atol=1e-4)
    assert weight_grad(dy, x, like=conv1d.T.contiguous()).is_contiguous()
    param = torch.nn.Parameter(conv1d.clone())
    from coda.ops import linear
    linear(x, param.T).backward(dy)
    torch.testing.assert_close(param.grad.double(), x.double().T @ dy.double(), rtol=1e-5, atol=1e-4)


# -- bias gradients formed by the next norm's dx map (common.bias_grad) -----------------------------
def _ln(x, g, beta, eps=1e-5):
    mean = x.mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(((x - mean) ** 2).mean(-1, keepdim=True) + eps) * g + beta


def _gelu(x):
    return 0.5 * x * (1.0 + torch.tanh((2.0 / torch.pi) ** 0.5 * (x + 0.044715 * x**3)))


def _count_column_sums(monkeypatch) -> list:
    """Record every map that sums a bias gradient over its dy (common.column_sum)."""
    from coda.ops import common

    calls = []
    monkeypatch.setattr(common, "column_sum", lambda t, dtype=None, _sum=common.column_sum:
                        calls.append(tuple(t.shape)) or _sum(t, dtype))
    return calls


def _blocks(a, w1, b1, r, g1, be1, wf, bf, wp, bp, g2, be2, wq, bq, twice=False):
    """A post-norm attention output (out_proj_residual -> layer_norm, as BERT's) feeding a
    pre-norm GPT-2 MLP whose output feeds the next block's LayerNorm-folded q/k/v; `twice` reads
    the MLP's output a second time (its gradient is then summed by autograd)."""
    from coda.nn import layer_norm
    from coda.ops import layer_norm_linear, mlp, out_proj_residual

    h, ss, s = out_proj_residual(a, w1, r, bias=b1, stats="layer")
    x = layer_norm(h, g1, be1, rowsum=s, sumsq=ss)
    y = mlp(x, wf, bf, wp, bp, "gelu", residual=x)
    out = layer_norm_linear(y, g2, be2, wq, bias=bq)
    return out + y[..., :wq.shape[0]] if twice else out


def _blocks_reference(a, w1, b1, r, g1, be1, wf, bf, wp, bp, g2, be2, wq, bq, twice=False):
    x = _ln(r + a @ w1.T + b1, g1, be1)
    y = x + _gelu(x @ wf.T + bf) @ wp.T + bp
    out = _ln(y, g2, be2) @ wq.T + bq
    return out + y[..., :wq.shape[0]] if twice else out


@pytest.mark.parametrize("twice", [False, True])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])   # reference; Triton kernels
def test_bias_gradients_come_with_the_next_norms_dx(dtype, twice, monkeypatch):
    """out_proj_residual's and mlp's bias gradients are the column sums that the dx map of the
    norm taking their output forms (no map over dy of their own); where that output is also read
    elsewhere, autograd sums its gradient and the bias gradient is a map over the sum. Every
    gradient against autograd of the float64 formula."""
    gen = torch.Generator().manual_seed(7)
    shapes = [(3, 7, 24), (40, 24), (40,), (3, 7, 40), (40,), (40,), (56, 40), (56,), (40, 56), (40,),
              (40,), (40,), (36, 40), (36,)]
    inputs = [torch.randn(*s, generator=gen, dtype=torch.float64) * (0.2 if len(s) == 2 else 1.0)
              for s in shapes]
    for i in (4, 10):   # the norms' gains near 1
        inputs[i] = inputs[i] * 0.1 + 1.0
    calls = _count_column_sums(monkeypatch)
    got_in = [t.to(dtype).requires_grad_() for t in inputs]
    want_in = [t.clone().requires_grad_() for t in inputs]
    upstream = torch.randn(3, 7, 36, generator=gen, dtype=torch.float64)
    got = torch.autograd.grad(_blocks(*got_in, twice=twice), got_in, upstream.to(dtype))
    want = torch.autograd.grad(_blocks_reference(*want_in, twice=twice), want_in, upstream)
    tol = 1e-10 if dtype == torch.float64 else 2e-5
    for index, (a, b) in enumerate(zip(got, want, strict=True)):
        assert (a.double() - b).norm() <= tol * b.norm(), index
    # out_proj_residual's b1 from layer_norm's dx map; mlp's bp from layer_norm_linear's, unless
    # the MLP's output was read twice
    assert calls == ([(21, 40)] if twice else [])


class _Consume(torch.autograd.Function):
    """y = x; backward records bias_grad(dy) (what a biased op's backward would take)."""

    @staticmethod
    def forward(ctx, x, taken, dtype):
        ctx.taken, ctx.dtype = taken, dtype
        return x.clone()

    @staticmethod
    def backward(ctx, dy):
        from coda.ops.common import bias_grad

        ctx.taken.append(bias_grad(dy, ctx.dtype))
        return dy, None, None


class _Produce(torch.autograd.Function):
    """z = y; backward forms dy and leaves a marker as its column sums, then maybe changes dy."""

    @staticmethod
    def forward(ctx, y, change):
        ctx.change = change
        return y.clone()

    @staticmethod
    def backward(ctx, dz):
        from coda.ops.common import leave_column_sums

        dy = dz.clone()
        leave_column_sums(dy, torch.full(dy.shape[-1:], 7.0, dtype=torch.float64))
        if ctx.change:
            dy.add_(1.0)   # changed in place after the sums were formed
        return dy, None


@pytest.mark.parametrize("case", ["taken", "read twice", "changed", "other dtype"])
def test_left_column_sums_match_only_their_unchanged_gradient(case):
    from coda.ops import common

    x = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    taken = []
    y = _Consume.apply(x, taken, torch.float32 if case == "other dtype" else torch.float64)
    z = _Produce.apply(y, case == "changed")
    (z * 2.0 + (y if case == "read twice" else 0.0)).sum().backward()
    marker = torch.full((3,), 7.0, dtype=torch.float64)
    want = marker if case == "taken" else x.grad.sum(0).to(taken[0].dtype)
    torch.testing.assert_close(taken[0], want)
    assert not common._LEFT   # nothing held past the backward pass
