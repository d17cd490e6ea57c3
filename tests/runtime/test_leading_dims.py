"""A with leading dimensions, [..., M, K] @ [K, N] (and a map's x [..., M, N]): one launch on the
rows, as torch.matmul broadcasts a 2-D B. Tiles and row vectors carry the leading dimensions,
column vectors and column reductions span every row. Checked against float64 NumPy formulas
(tests/oracle.py) on the reference backend and through the real kernels (the interpreter)."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

import coda
from oracle import ELEMENTWISE, np64

PROGRAM = coda.compile("""
EPILOGUE(bias: col, residual: tile, scale: row) {
  h = input + bias;
  output = gelu(h) * scale + residual;
  s = row_sum(h);
  c = col_sum(h);
}""")
LEAD, M, N, K = (2, 3), 5, 6, 8
TOL = {torch.float64: 1e-12, torch.float32: 1e-5}


def inputs(dtype: torch.dtype, seed: int) -> tuple[torch.Tensor, torch.Tensor, dict]:
    g = torch.Generator().manual_seed(seed)
    a, b = torch.randn(*LEAD, M, K, generator=g), torch.randn(K, N, generator=g)
    operands = dict(bias=torch.randn(N, generator=g), residual=torch.randn(*LEAD, M, N, generator=g),
                    scale=torch.randn(*LEAD, M, generator=g))
    return a.to(dtype), b.to(dtype), {k: v.to(dtype) for k, v in operands.items()}


def expected(a, b, operands) -> dict[str, np.ndarray]:
    h = np64(a) @ np64(b) + np64(operands["bias"])
    gelu = ELEMENTWISE["gelu"][0]
    return {"output": gelu(h) * np64(operands["scale"])[..., None] + np64(operands["residual"]),
            "s": h.sum(-1), "c": h.reshape(-1, N).sum(0)}


def assert_matches(outs: dict, want: dict, dtype: torch.dtype) -> None:
    assert list(outs) == ["output", "s", "c"]
    for name, value in want.items():
        got = np64(outs[name])
        assert got.shape == value.shape, name
        assert np.abs(got - value).max() <= TOL[dtype] * max(1.0, np.abs(value).max()), name


@pytest.mark.parametrize("backend, dtype", [("reference", torch.float64), ("triton", torch.float32)])
def test_gemm_with_leading_dimensions(backend, dtype):
    seed = random.randrange(2**31)
    for trial in range(2):   # the second launch takes the cached plan, with new values
        a, b, operands = inputs(dtype, seed + trial)
        assert_matches(PROGRAM(a, b, backend=backend, **operands), expected(a, b, operands), dtype)


def test_strided_a_and_operands_and_out():
    """A whose batch dimensions do not flatten in place (copied), a transposed B, and out= whose
    leading dimensions do: written in place and returned as it is."""
    a, b, operands = inputs(torch.float32, random.randrange(2**31))
    a_strided = a.transpose(0, 1).contiguous().transpose(0, 1)      # [2, 3, M, K], batch dims swapped
    b_t = b.T.contiguous().T
    out = torch.full((*LEAD, M, N), float("nan"))
    outs = PROGRAM(a_strided, b_t, out=out, **operands)
    assert outs["output"] is out
    assert_matches(outs, expected(a, b, operands), torch.float32)


def test_map_with_leading_dimensions():
    prog = coda.compile("EPILOGUE(g: col) { output = input * g; ss = row_sum(input * input); "
                        "db = col_sum(input); }")
    x, g = torch.randn(4, M, N), torch.randn(N)
    outs = prog.map(x, g=g)
    xs = np64(x)
    np.testing.assert_allclose(np64(outs["output"]), xs * np64(g), rtol=1e-6)
    np.testing.assert_allclose(np64(outs["ss"]), (xs * xs).sum(-1), rtol=1e-5)
    np.testing.assert_allclose(np64(outs["db"]), xs.reshape(-1, N).sum(0), rtol=1e-5, atol=1e-5)


def test_bind_and_explain_see_the_rows():
    a, b, operands = inputs(torch.float32, 0)
    launch = PROGRAM.bind(a, b, **operands)
    assert (launch.m, launch.n, launch.k) == (6 * M, N, K)
    assert launch.kinds == {"bias": "col", "residual": "tile", "scale": "row"}
    assert "residual: tile" in PROGRAM.explain(a, b, **operands)


def test_leading_dimension_errors():
    a, b, operands = inputs(torch.float64, 0)
    with pytest.raises(coda.LaunchError, match=r"B must be 2-D \[K, N\], got \[2, 8, 6\]: for a batch"):
        PROGRAM(a, b.expand(2, K, N), **operands)
    bad = operands | {"residual": operands["residual"][0]}
    with pytest.raises(coda.LaunchError, match=r"operand 'residual' has shape \[3, 5, 6\]: with A's "
                                               r"leading dimensions \[2, 3\], a tile is \[2, 3, M, N\]"):
        PROGRAM(a, b, **bad)
    with pytest.raises(coda.LaunchError, match=r"out=: with A of shape \[2, 3, 5, 8\], expected "
                                               r"\[2, 3, 5, N\]"):
        PROGRAM(a, b, out=torch.empty(6 * M, N, dtype=torch.float64), **operands)
    strided = torch.empty(3, 2, M, N, dtype=torch.float64).transpose(0, 1)
    with pytest.raises(coda.LaunchError, match="cannot be viewed as"):
        PROGRAM(a, b, out=strided, **operands)


def test_options_over_the_flattened_rows():
    """a_col_sums and unfinished row sums (Partials) are over the flattened rows; an accumulating
    program adds into out= with leading dimensions in place."""
    prog = coda.compile("EPILOGUE { output = input; s = row_sum(input); }")
    a, b = torch.randn(2, 3, M, K), torch.randn(K, N)
    outs = prog(a, b, a_col_sums=True, unfinished=["s"])
    assert outs["output"].shape == (2, 3, M, N) and isinstance(outs["s"], coda.Partials)
    np.testing.assert_allclose(np64(outs["a_col_sums"]), np64(a).reshape(-1, K).sum(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np64(outs["s"].total()), (np64(a) @ np64(b)).sum(-1).reshape(-1),
                               rtol=1e-5, atol=1e-5)
    out = torch.ones(2, 3, M, N)
    assert coda.compile("EPILOGUE { output += input; }")(a, b, out=out)["output"] is out
    np.testing.assert_allclose(np64(out), 1 + np64(a) @ np64(b), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", ["triton", "reference"])
def test_leading_dimensions_with_an_empty_last_dimension(backend):
    """A [2, 3, 0] A (K = 0), map input or tile operand (N = 0): the rows were inferred by
    reshape(-1, 0), which PyTorch cannot do, a RuntimeError on both backends (an audit's find)."""
    prog = coda.compile("EPILOGUE(t: tile) { output = input + t; s = row_sum(input); }")
    a, b, t = torch.randn(2, 3, 0), torch.randn(0, 4), torch.randn(2, 3, 4)
    got = prog(a, b, t=t, backend=backend)
    assert torch.equal(got["output"], t) and torch.equal(got["s"], torch.zeros(2, 3))
    x, t0 = torch.randn(2, 3, 0), torch.randn(2, 3, 0)
    out = torch.empty(2, 3, 0)
    got = prog.map(x, t=t0, out=out, backend=backend)
    assert got["output"] is out and got["s"].shape == (2, 3) and torch.equal(got["s"], torch.zeros(2, 3))
