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
