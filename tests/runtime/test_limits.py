"""`m_limit=` and `k_limit=`: a launch that runs as if M (K) were at most a count held on the
device, checked against eager PyTorch of the rows (depths) before the limit, through the
Triton interpreter (the portable GEMM and the map kernel, reductions finished under the limit)
and the reference backend; the rows past the limit keep their poison."""

from __future__ import annotations

import pytest
import torch

import coda

PROGRAM = coda.compile("EPILOGUE limited(b: col, r: row) { h = input * r + b; output = h;"
                       " s = row_sum(h); c = col_sum(h); lse = row_logsumexp(h); }")
M, N, K = 70, 48, 40
#: none, within a tile, tile edges, all, past M, and int64 values int32 cannot hold (2**63 - 1, a
#: "no limit" to keep in a CUDA graph's tensor, wrapped to -1 in the kernels: no row was computed)
LIMITS = [0, 1, 31, 32, 64, 69, 70, 500, 2**32 + 3, 2**63 - 1, -2**40]


def operands(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(M, K, generator=g), torch.randn(K, N, generator=g), torch.randn(N, generator=g),
            torch.rand(M, generator=g) + 0.5)


def expected(h: torch.Tensor) -> dict[str, torch.Tensor]:
    """The program's outputs of the rows h holds, in float64."""
    return {"output": h, "s": h.sum(1), "c": h.sum(0), "lse": torch.logsumexp(h, 1)}


def check(got: dict, want: dict, rows: int, poison: torch.Tensor) -> None:
    for name, value in want.items():
        result = got[name] if name == "c" else got[name][:rows]
        torch.testing.assert_close(result.double(), value, rtol=1e-5, atol=1e-4)
    assert torch.equal(got["output"][rows:].isnan(), torch.ones_like(poison[rows:], dtype=torch.bool))


@pytest.mark.parametrize("backend", ["triton", "reference"])
@pytest.mark.parametrize("limit", LIMITS)
def test_m_limit_gemm_and_map(backend, limit, monkeypatch):
    if backend == "triton":
        monkeypatch.setenv("TRITON_INTERPRET", "1")
    a, b, bias, r = operands(limit % 1000)
    rows = min(max(limit, 0), M)
    count = torch.tensor([limit], dtype=torch.int32 if abs(limit) < 2**31 else torch.int64)
    want = expected((a[:rows].double() @ b.double()) * r[:rows, None].double() + bias.double())
    poison = torch.full((M, N), float("nan"))
    got = PROGRAM(a, b, b=bias, r=r, out=poison.clone(), m_limit=count, backend=backend)
    check(got, want, rows, poison)
    x = torch.randn(M, N)
    got = PROGRAM.map(x, b=bias, r=r, out=poison.clone(), m_limit=count.long(), backend=backend)
    check(got, expected(x[:rows].double() * r[:rows, None].double() + bias.double()), rows, poison)


@pytest.mark.parametrize("backend", ["triton", "reference"])
@pytest.mark.parametrize("limit", [0, 1, 17, 32, 40, 99, 2**32 + 3, 2**63 - 1])
def test_k_limit_gemm(backend, limit, monkeypatch):
    if backend == "triton":
        monkeypatch.setenv("TRITON_INTERPRET", "1")
    a, b, bias, r = operands(100 + limit % 1000)
    depth = min(limit, K)
    got = PROGRAM(a, b, b=bias, r=r, k_limit=torch.tensor([limit]), backend=backend)
    want = expected((a[:, :depth].double() @ b[:depth].double()) * r[:, None].double() + bias.double())
    check(got, want, M, torch.empty(M, N))


def test_limit_errors():
    a, b, bias, r = operands(0)
    with pytest.raises(coda.CodaError, match=r"m_limit= must be a one-element int32 or int64 tensor"):
        PROGRAM(a, b, b=bias, r=r, m_limit=5)
    with pytest.raises(coda.CodaError, match=r"k_limit= must be .* got a torch.float32 tensor"):
        PROGRAM(a, b, b=bias, r=r, k_limit=torch.tensor([5.0]))
    with pytest.raises(coda.CodaError, match=r"m_limit= must be .* shape \[2\]"):
        PROGRAM(a, b, b=bias, r=r, m_limit=torch.tensor([5, 6]))
    with pytest.raises(coda.CodaError, match=r"k_limit= bounds a GEMM.s K: a map has none"):
        PROGRAM.bind(a, None, b=torch.randn(K), r=r, k_limit=torch.tensor([5]))
    if torch.cuda.is_available():
        with pytest.raises(coda.CodaError, match="m_limit= is on cuda"):
            PROGRAM(a, b, b=bias, r=r, m_limit=torch.tensor([5], device="cuda"))


@pytest.mark.parametrize("limit", [0, 20, 64, 90, 104])
def test_m_limit_over_a_concat_along_m(limit, monkeypatch):
    """A Concat A (or map input) joined along M: pieces past the limit, or cut by it, are read
    only before it."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    sums = coda.compile("EPILOGUE p() { output = input; c = col_sum(input); }")
    g = torch.Generator().manual_seed(limit)
    top, bottom, b = (torch.randn(*shape, generator=g) for shape in ((64, 40), (40, 40), (40, 24)))
    count = torch.tensor([limit])
    got = sums(coda.Concat((top, bottom), 0), b, out=torch.full((104, 24), float("nan")), m_limit=count)
    want = (torch.cat((top, bottom)).double() @ b.double())[:limit]
    torch.testing.assert_close(got["output"][:limit].double(), want, rtol=1e-5, atol=1e-4)
    assert got["output"][limit:].isnan().all()
    torch.testing.assert_close(got["c"].double(), want.sum(0), rtol=1e-5, atol=1e-4)
    pieces = (torch.randn(64, 24, generator=g), torch.randn(40, 24, generator=g))
    got = sums.map(coda.Concat(pieces, 0), m_limit=count, outputs=["c"])
    want = torch.cat(pieces).double()[:limit].sum(0)
    torch.testing.assert_close(got["c"].double(), want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("backend", ["triton", "reference"])
def test_m_limit_with_rope_tables(backend, monkeypatch):
    """`head` tables ([M, H]) are cut to the limit's rows like tiles and rows: the reference
    backend left them whole and raised a size mismatch (an audit's find)."""
    if backend == "triton":
        monkeypatch.setenv("TRITON_INTERPRET", "1")
    prog = coda.compile("EPILOGUE r(cos: head, sin: head) { output = rope(input, cos, sin); }")
    g = torch.Generator().manual_seed(3)
    a, b = torch.randn(40, 16, generator=g), torch.randn(16, 48, generator=g)
    angle = torch.rand(40, 24, generator=g) * 6
    cos, sin = angle.cos(), angle.sin()
    poison = torch.full((40, 48), float("nan"))
    got = prog(a, b, cos=cos, sin=sin, m_limit=torch.tensor([21]), out=poison.clone(), backend=backend)
    whole = prog.reference(a, b, cos=cos, sin=sin)["output"]
    torch.testing.assert_close(got["output"][:21], whole[:21])
    assert got["output"][21:].isnan().all()
