"""The generated epilogue's stores, through the Triton interpreter (the real kernels)."""

from __future__ import annotations

import pytest
import torch

import coda
from coda.runtime.program import interpreter_enabled

pytestmark = pytest.mark.skipif(not interpreter_enabled(), reason="needs TRITON_INTERPRET=1 on a CPU")


@pytest.mark.parametrize("launch", ["gemm", "map"])
def test_unfinished_row_sums_under_m_limit_lie_where_partials_read_them(launch):
    """Under m_limit the kernel's M is the limit, but an unfinished sum's [P, M] parts are read
    M apart: each column tile's part of a row must go to row M of its part, not to row limit
    (it once did, so rows before the limit added the wrong values)."""
    prog = coda.compile("EPILOGUE(c: col) { output = input; s = row_sum(input * c); }")
    m, n, k, limit = 33, 130, 7, 2   # 5 column tiles of 32: 5 parts
    g = torch.Generator().manual_seed(0)
    a, b, x = torch.randn(m, k, generator=g), torch.randn(k, n, generator=g), torch.randn(m, n, generator=g)
    c = torch.randn(n, generator=g)
    count = torch.tensor([limit])
    if launch == "gemm":
        y = a.double() @ b.double()
        got = prog(a, b, c=c, unfinished=["s"], m_limit=count, backend="triton")["s"]
    else:
        y = x.double()
        got = prog.map(x, c=c, unfinished=["s"], m_limit=count, backend="triton")["s"]
    assert got.parts.shape == (5, m)
    want = (y * c.double()).sum(1)[:limit]
    torch.testing.assert_close(got.total()[:limit].double(), want, rtol=1e-5, atol=1e-5)
