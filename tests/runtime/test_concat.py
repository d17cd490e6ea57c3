"""coda.Concat: a GEMM's A, or a map's input, given as pieces joined along K or M (a map's
columns or rows), read where they lie.

Through the Triton interpreter (the real portable and map kernels) in float32 against the float64
result of the joined tensor: along K (ragged piece widths, which the K loop's masks must keep
apart), along M (pieces in whole row blocks, read in place; and pieces the kernel cannot read as
they lie, which the launch joins), A given transposed (`.T`, a weight gradient's `dy.T`), maps
over pieces in whole tiles (read in place) and ragged ones (joined), the cached relaunch, and the
reference backend. Outputs are poisoned before the launch writes them.
"""

from __future__ import annotations

import pytest
import torch

import coda
from coda.codegen import kernel as kernel_module

PROG = coda.compile("EPILOGUE(bias: col) { output = input + bias;"
                    " s = row_sum(output); c = col_sum(output); }")
TOL = 2e-4   # float32 sums of up to ~130 products of unit normals, relative to their scale


def pieces(shapes, seed, transposed=False):
    g = torch.Generator().manual_seed(seed)
    made = [torch.randn(*s, generator=g) for s in shapes]
    return [p.T.contiguous().T for p in made] if transposed else made


def expected(whole, b, bias):
    y = whole.double() @ b.double() + bias.double()
    return {"output": y, "s": y.sum(1), "c": y.sum(0)}


def check(got, want):
    for name, value in want.items():
        scale = value.abs().max().item()
        assert (got[name].double() - value).abs().max().item() <= TOL * max(scale, 1.0), name


@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("dim, shapes", [
    (1, [(70, 40), (70, 64), (70, 24)]),        # along K, widths not multiples of BLOCK_K
    (1, [(33, 32), (33, 32)]),
    (0, [(64, 50), (32, 50), (96, 50)]),         # along M, in whole 32-row blocks
    (0, [(64, 20), (32, 20), (32, 20), (7, 20)]),  # four pieces, a ragged last one
])
def test_concat_matches_the_joined_product(dim, shapes, transposed):
    parts = pieces(shapes, seed=len(shapes) + dim, transposed=transposed)
    whole = torch.cat(parts, dim)
    g = torch.Generator().manual_seed(7)
    b, bias = torch.randn(whole.shape[1], 72, generator=g), torch.randn(72, generator=g)
    for _ in range(2):   # the first launch builds the plan, the second takes the cached path
        got = PROG(coda.Concat(parts, dim), b, bias=bias)
        check(got, expected(whole, b, bias))


def test_concat_read_in_place_or_joined(monkeypatch):
    """Pieces in whole row blocks run as pieces; pieces along M of 50 rows (not whole 32-row
    blocks) or of unequal strides are joined, and are as right."""
    made = []
    original = kernel_module.Plan.__init__

    def spy(self, kernel, config, launch, **options):
        original(self, kernel, config, launch, **options)
        made.append(self.meta["A_PIECES"])

    monkeypatch.setattr(kernel_module.Plan, "__init__", spy)
    g = torch.Generator().manual_seed(3)
    b, bias = torch.randn(40, 24, generator=g), torch.randn(24, generator=g)
    for parts, read in (([torch.randn(32, 40), torch.randn(64, 40)], 2),
                        ([torch.randn(50, 40), torch.randn(30, 40)], 1),
                        ([torch.randn(32, 40), torch.randn(40, 32).T], 1)):
        check(PROG(coda.Concat(parts, 0), b, bias=bias), expected(torch.cat(parts), b, bias))
        assert made[-1] == read


@pytest.mark.parametrize("dim, shapes, read", [
    (1, [(70, 64), (70, 32), (70, 40)], 3),    # columns, in whole 32-wide tiles: read in place
    (0, [(32, 50), (64, 50), (9, 50)], 3),     # rows, in whole 32-row tiles
    (1, [(40, 20), (40, 50)], 1),              # a piece not a whole tile wide: joined
])
def test_map_over_a_concat(dim, shapes, read, monkeypatch):
    """A map's input as a Concat: each tile reads the piece it lies in (or the launch joins
    pieces that are not whole tiles); the tile and both sums as those of the joined tensor.
    Pieces of one row stride (column blocks of equal buffers: the kernel takes one stride)."""
    made = []
    original = kernel_module.Plan.__init__

    def spy(self, kernel, config, launch, **options):
        original(self, kernel, config, launch, **options)
        made.append(self.meta["A_PIECES"])

    monkeypatch.setattr(kernel_module.Plan, "__init__", spy)
    widest = max(cols for _, cols in shapes)
    buffers = pieces([(rows, widest) for rows, _ in shapes], seed=11 + dim)
    parts = [p[:, :cols] for p, (_, cols) in zip(buffers, shapes, strict=True)]
    whole = torch.cat(parts, dim)
    bias = torch.randn(whole.shape[1], generator=torch.Generator().manual_seed(12))
    want = {"output": whole.double() + bias.double()}
    want |= {"s": want["output"].sum(1), "c": want["output"].sum(0)}
    for _ in range(2):   # the first launch builds the plan, the second takes the cached path
        out = torch.full(whole.shape, float("nan"))
        got = PROG.map(coda.Concat(parts, dim), bias=bias, out=out)
        check(got, want)
    assert made == [read]


def test_transpose_of_a_concat():
    parts = pieces([(48, 32), (48, 64)], seed=5)
    cat = coda.Concat(parts, 1)
    assert cat.T.dim == 0 and cat.T.shape == (96, 48) and cat.shape == (48, 96)
    b, bias = torch.randn(48, 16), torch.randn(16)
    check(PROG(cat.T, b, bias=bias), expected(torch.cat(parts, 1).T, b, bias))


def test_out_is_written_whole():
    parts = pieces([(40, 32), (40, 32)], seed=9)
    b, bias = torch.randn(64, 24), torch.randn(24)
    out = torch.full((40, 24), float("nan"))
    PROG(coda.Concat(parts, 1), b, bias=bias, out=out)
    check({"output": out}, {"output": expected(torch.cat(parts, 1), b, bias)["output"]})


def test_reference_backend_joins():
    parts = [torch.randn(8, 4, dtype=torch.float64), torch.randn(8, 6, dtype=torch.float64)]
    b, bias = torch.randn(10, 5, dtype=torch.float64), torch.randn(5, dtype=torch.float64)
    got = PROG(coda.Concat(parts, 1), b, bias=bias)   # float64: the reference backend
    assert torch.allclose(got["output"], torch.cat(parts, 1) @ b + bias)
    bias10 = torch.randn(10, dtype=torch.float64)
    got = PROG.map(coda.Concat(parts, 1), bias=bias10)
    assert torch.allclose(got["c"], (torch.cat(parts, 1) + bias10).sum(0))


@pytest.mark.parametrize("make, message", [
    (lambda: coda.Concat([torch.randn(3, 4), torch.randn(3, 5)], 0), "dim 1 must match"),
    (lambda: coda.Concat([torch.randn(3, 4), torch.randn(3, 5, dtype=torch.float64)], 1), "must match"),
    (lambda: coda.Concat([torch.randn(3, 4)] * 5, 1), "1 to 4 pieces"),
    (lambda: coda.Concat([torch.randn(3)], 1), "2-D"),
    (lambda: coda.Concat([torch.randn(3, 4)], 2), "dim must be 0 or 1"),
    (lambda: PROG(coda.Concat([torch.randn(3, 4)] * 2, 1), torch.randn(7, 2), bias=torch.randn(2)),
     r"A is \[M, K\] = \[3, 8\] .* K differ \(8 vs 7\)"),   # the joined A's shape, not a piece's
])
def test_concat_errors(make, message):
    with pytest.raises(coda.LaunchError, match=message):
        make()
