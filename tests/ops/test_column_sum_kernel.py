"""coda.ops.column_sum_kernel (the bias gradient's column sum) through the Triton interpreter,
against float64 sums of fresh random inputs: pieces joined along columns read where they lie,
ragged rows and columns, several row parts per strip (the last program of a strip adds them),
the same result launch after launch (the tickets go back to zero), and `common.column_sum`
taking it or, for pieces it cannot read, the SUMS map."""

from __future__ import annotations

import pytest
import torch

import coda
from coda.ops import column_sum_kernel
from coda.ops.common import column_sum

#: float32 sums of a few hundred values: relative error ~ 1e-6 of the absolute sum
SUM_RTOL = {torch.float32: 1e-5, torch.float16: 1e-3}


@pytest.mark.parametrize("rows, widths", [(300, (64, 64, 48)), (257, (96,)), (64, (32, 32, 32)),
                                          (1000, (40,))])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_kernel_matches_float64(rows, widths, dtype):
    g = torch.Generator().manual_seed(rows + len(widths))
    pieces = [torch.randn(rows, w, generator=g).to(dtype) for w in widths]
    exact = torch.cat(pieces, 1).double().sum(0)
    scale = torch.cat(pieces, 1).double().abs().sum(0)
    results = []
    for _ in range(2):   # the second launch reuses the tickets the first put back to zero
        out = torch.full((sum(widths),), float("nan"), dtype=dtype)
        column_sum_kernel.launch(pieces, out, block_m=16, block_n=32, stages=1)
        assert ((out.double() - exact).abs() <= SUM_RTOL[dtype] * scale).all()
        results.append(out)
    assert torch.equal(results[0], results[1])


def test_column_sum_takes_the_kernel_where_it_fits(monkeypatch):
    launched = []
    real = column_sum_kernel.launch
    monkeypatch.setattr(column_sum_kernel, "launch", lambda *a, **k: launched.append(1) or real(*a, **k))
    g = torch.Generator().manual_seed(3)
    fitting = coda.Concat([torch.randn(70, w, generator=g) for w in (64, 64, 16)], 1)
    ragged = coda.Concat([torch.randn(70, w, generator=g) for w in (16, 16, 32)], 1)   # SUMS map
    for t in (fitting, ragged, fitting.pieces[0]):
        exact = torch.cat(t.pieces, 1).double().sum(0) if isinstance(t, coda.Concat) else t.double().sum(0)
        got = column_sum(t, torch.float16)
        assert got.dtype == torch.float16
        torch.testing.assert_close(got.double(), exact, rtol=1e-3, atol=1e-2)
    assert len(launched) == 2
