"""Reductions finished inside the kernel (codegen/epilogue.py `finish`), through the Triton
interpreter: the tile that takes a row block's (column slice's) last ticket merges the partials.

Shapes give more partials than one step of the merge reads (32 a step, 32-wide interpreter
tiles), results are compared with float64, counters must be zero after every launch (the next
launch counts from there), and the host path for wide row reductions must agree."""

from __future__ import annotations

import pytest
import torch

import coda
from coda.codegen import kernel as kernel_module

PROGRAM = ("EPILOGUE(residual: tile) { output = input + residual; ss = row_sum(output * output);"
           " top = row_max(input); lse = row_logsumexp(input); cs = col_sum(input); cm = col_max(input); }")


def reference(a: torch.Tensor, b: torch.Tensor, residual: torch.Tensor) -> dict[str, torch.Tensor]:
    x = a.double() @ b.double()
    y = x + residual.double()
    return {"output": y, "ss": (y * y).sum(1), "top": x.amax(1), "lse": torch.logsumexp(x, 1),
            "cs": x.sum(0), "cm": x.amax(0)}


def counters_zero() -> bool:
    pool = kernel_module.TICKETS._pools.get(torch.device("cpu"))
    return pool is None or not pool[0].any()


# 34 column tiles (2 merge steps of the row reductions) / 34 row blocks (2 of the column ones)
@pytest.mark.parametrize(("m", "n"), [(40, 1061), (1061, 40), (1, 1)])
def test_finished_reductions_match_float64(m, n):
    prog = coda.compile(PROGRAM)
    g = torch.Generator().manual_seed(m * n)
    for _ in range(2):   # the second launch counts from the counters the first left
        a, b = torch.randn(m, 8, generator=g), torch.randn(8, n, generator=g)
        residual = torch.randn(m, n, generator=g)
        out = prog(a, b, residual=residual)
        want = reference(a, b, residual)
        for key, value in out.items():
            torch.testing.assert_close(value.double(), want[key], rtol=1e-5, atol=1e-4, msg=key)
        assert counters_zero()
    assert kernel_module.FINISH_ROWS_UP_TO >= n
    assert "atomic_add(row_tickets_ptr" in prog.triton.kernel(prog.bind(a, b, residual=residual)).source


def test_wide_row_reductions_are_merged_by_the_host(monkeypatch):
    """Past FINISH_ROWS_UP_TO columns the row reductions go to codegen/finish.py (the column
    ones stay in the kernel): same results."""
    monkeypatch.setattr(kernel_module, "FINISH_ROWS_UP_TO", 64)
    prog = coda.compile(PROGRAM)
    g = torch.Generator().manual_seed(5)
    a, b, residual = torch.randn(40, 8, generator=g), torch.randn(8, 130, generator=g), torch.randn(40, 130)
    launch = prog.bind(a, b, residual=residual)
    signature = kernel_module._signature(launch, "portable")
    assert signature.finished == {"cs", "cm"}
    out = prog(a, b, residual=residual)
    want = reference(a, b, residual)
    for key, value in out.items():
        torch.testing.assert_close(value.double(), want[key], rtol=1e-5, atol=1e-4, msg=key)
    assert counters_zero()


def test_a_map_finishes_its_column_sums():
    sums = coda.compile("EPILOGUE sums() { output = input; rows = row_sum(input); cols = col_sum(input); }")
    x = torch.randn(1100, 70)
    out = sums.map(x, outputs=["rows", "cols"])
    torch.testing.assert_close(out["cols"].double(), x.double().sum(0), rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(out["rows"].double(), x.double().sum(1), rtol=1e-5, atol=1e-4)
    assert counters_zero()
