"""The reference backend against independent float64 formulas: every primitive of the registry,
at odd shapes, in float64 (tight) and float32 (a float32 tolerance), plus outputs, dtypes, `out=`."""

from __future__ import annotations

import importlib
import math

import numpy as np
import pytest
import torch

import coda
from coda.primitives import PRIMITIVES
from oracle import (
    DERIVATIVES,
    ELEMENTWISE,
    REDUCTIONS,
    assert_close64,
    dropout_mask_from_rng,
    launch_inputs,
    np64,
    random_values,
    rope,
    unpack,
)

#: (M, N, K): odd sizes, K = 1, M = 1, N = 1, and one square case (kinds are declared).
SHAPES = [(5, 7, 3), (13, 6, 1), (1, 9, 4), (31, 17, 65), (8, 8, 8), (3, 1, 2)]
HEADER = "EPILOGUE (t: tile, r: row, c: col, s: scalar)"

ARG_SOURCES = {
    1: [("input",), ("t",), ("r",), ("c",), ("s",)],
    2: [("input", "t"), ("r", "input"), ("input", "c"), ("s", "input"), ("c", "r"), ("t", "s")],
    3: [("t", "input", "r"), ("input", "c", "s"), ("r", "t", "input"), ("s", "r", "c")],
}


def test_every_primitive_has_an_independent_formula():
    forms = {p.form for p in PRIMITIVES.values()}
    assert forms <= {"elementwise", "dropout", "index", "rope", "unpack", "pack", "reduction"}
    elementwise = {n for n, p in PRIMITIVES.items() if p.form == "elementwise"}
    assert elementwise == set(ELEMENTWISE), "a primitive without an independent formula in oracle.py"
    for name, (_, domains) in ELEMENTWISE.items():
        assert len(domains) == PRIMITIVES[name].arity, name
    reductions = {n for n, p in PRIMITIVES.items() if p.form == "reduction"}
    assert reductions == set(REDUCTIONS)
    # the special forms, each tested below
    assert {n for n, p in PRIMITIVES.items() if p.form not in ("elementwise", "reduction")} == {
        "dropout", "rope", "unpack", "pack", "row_index", "col_index"}


@pytest.mark.parametrize("shape", [(5, 7, 3), (1, 1, 1), (33, 16, 2)])
def test_row_and_col_index(shape):
    m, n, k = shape
    prog = coda.compile("EPILOGUE(target: row) { output = row_index() * 1000.0 + col_index();"
                        " picked = row_sum(where(col_index() == target, input, 0.0)); }")
    a, b = torch.randn(m, k, dtype=torch.float64), torch.randn(k, n, dtype=torch.float64)
    target = torch.randint(0, n, (m,)).double()
    out = prog.reference(a, b, target=target)
    rows, cols = np.meshgrid(np.arange(m), np.arange(n), indexing="ij")
    assert_close64(out["output"], rows * 1000.0 + cols)
    acc = np64(a) @ np64(b)
    assert_close64(out["picked"], acc[np.arange(m), target.long().numpy()])


def _bind_sources(sources, domains, m, n, k, seed, dtype=torch.float64):
    """Launch tensors and operand values with each argument in its domain; and the same values as
    NumPy arrays shaped to broadcast against [M, N]."""
    input_domain = next((d for s, d in zip(sources, domains, strict=True) if s == "input"), "any")
    a, b = launch_inputs(m, n, k, seed=seed, dtype=dtype, domain=input_domain)
    g = torch.Generator().manual_seed(seed + 1)
    dom = {s: d for s, d in zip(sources, domains, strict=True)}
    ops = {
        "t": random_values((m, n), dom.get("t", "any"), g, dtype),
        "r": random_values((m,), dom.get("r", "any"), g, dtype),
        "c": random_values((n,), dom.get("c", "any"), g, dtype),
        "s": float(random_values((), dom.get("s", "any"), g)),
    }
    arrays = {"input": np64(a) @ np64(b), "t": np64(ops["t"]), "r": np64(ops["r"])[:, None],
              "c": np64(ops["c"])[None, :], "s": np.float64(ops["s"])}
    return a, b, ops, arrays


def _cases():
    for name, (_, domains) in ELEMENTWISE.items():
        for sources in ARG_SOURCES[len(domains)]:
            yield pytest.param(name, sources, id=f"{name}({','.join(sources)})")


@pytest.mark.parametrize("name, sources", list(_cases()))
def test_elementwise_primitive_float64(name, sources):
    formula, domains = ELEMENTWISE[name]
    prog = coda.compile(f"{HEADER} {{ output = {name}({', '.join(sources)}); }}")
    for i, (m, n, k) in enumerate(SHAPES):
        a, b, ops, arrays = _bind_sources(sources, domains, m, n, k, seed=1000 * i + len(name))
        got = prog.reference(a, b, **ops)["output"]
        assert got.dtype == torch.float64 and got.shape == (m, n)
        want = np.broadcast_to(formula(*(arrays[s] for s in sources)), (m, n))
        assert_close64(got, want)


@pytest.mark.parametrize("name", sorted(ELEMENTWISE))
def test_elementwise_primitive_float32(name):
    """float32 inputs: the reference computes in float32. The GEMM's error is bounded by
    K·u·(|A|·|B|) with u = 2**-24, and the functions here add a few u of their own with condition
    numbers of order 1 on these inputs; 32·K·u (relative and absolute, values of order 1) covers both."""
    formula, domains = ELEMENTWISE[name]
    sources = ARG_SOURCES[len(domains)][0]
    prog = coda.compile(f"{HEADER} {{ output = {name}({', '.join(sources)}); }}")
    for i, (m, n, k) in enumerate([(9, 10, 17), (4, 3, 1), (1, 5, 6)]):
        a, b, ops, arrays = _bind_sources(sources, domains, m, n, k, seed=77 + i, dtype=torch.float32)
        got = prog.reference(a, b, **ops)["output"]
        assert got.dtype == torch.float32
        want = np.broadcast_to(formula(*(arrays[s] for s in sources)), (m, n))
        tol = 32 * k * 2.0**-24
        np.testing.assert_allclose(np64(got), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("name, infix", [(p.name, p.infix) for p in PRIMITIVES.values() if p.infix])
def test_infix_operators_are_the_primitives(name, infix):
    a = coda.compile(f"output = {name}(input, t);")
    b = coda.compile(f"output = input {infix} t;")
    assert coda.ir.format_epilogue(a.ir) == coda.ir.format_epilogue(b.ir)


def test_unary_minus_is_neg():
    a = coda.compile("output = neg(input) * t;")
    b = coda.compile("output = -input * t;")
    assert coda.ir.format_epilogue(a.ir) == coda.ir.format_epilogue(b.ir)


@pytest.mark.parametrize("act, grad", sorted(DERIVATIVES.items()))
def test_derivative_primitives_are_derivatives(act, grad):
    """d act / dx by central differences of CODA's own `act`, against CODA's `grad` (float64)."""
    x = torch.linspace(-6, 6, 241, dtype=torch.float64)[None, :]
    x = x[:, (x[0].abs() > 1e-3)]          # relu is not differentiable at 0
    eye = torch.eye(1, dtype=torch.float64)
    h = 1e-6

    def run(expr, shift):
        prog = coda.compile(f"output = {expr};")
        return prog.reference(eye, x + shift)["output"]

    numeric = (run(f"{act}(input)", h) - run(f"{act}(input)", -h)) / (2 * h)
    analytic = run(f"{grad}(input)", 0.0)
    torch.testing.assert_close(analytic, numeric, rtol=1e-7, atol=1e-7)
    # and the oracle's formulas agree with each other the same way
    xn = np64(x)
    oracle_numeric = (ELEMENTWISE[act][0](xn + h) - ELEMENTWISE[act][0](xn - h)) / (2 * h)
    np.testing.assert_allclose(ELEMENTWISE[grad][0](xn), oracle_numeric, rtol=1e-7, atol=1e-7)


def test_gelu_formulas_written_out():
    x = torch.tensor([[-3.0, -1.0, -0.1, 0.0, 0.5, 2.0, 7.0]], dtype=torch.float64)
    eye = torch.eye(1, dtype=torch.float64)
    got = coda.compile("output = gelu(input);\nsave e = gelu_erf(input);").reference(eye, x)
    for i, v in enumerate(x[0].tolist()):
        tanh_form = 0.5 * v * (1 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v**3)))
        erf_form = 0.5 * v * (1 + math.erf(v / math.sqrt(2)))
        assert math.isclose(got["output"][0, i].item(), tanh_form, rel_tol=1e-14, abs_tol=1e-300)
        assert math.isclose(got["e"][0, i].item(), erf_form, rel_tol=1e-14, abs_tol=1e-300)


def test_comparisons_give_one_and_zero_and_where_tests_nonzero():
    eye = torch.eye(1, dtype=torch.float64)
    x = torch.tensor([[-1.0, 0.0, 0.5, 1.0, 2.0]], dtype=torch.float64)
    got = coda.compile("output = input < 1;\nsave w = where(input, 10, 20);\n"
                       "save e = (input == 1) + (input != 0) * 2;").reference(eye, x)
    assert got["output"].tolist() == [[1.0, 1.0, 1.0, 0.0, 0.0]]
    assert got["w"].tolist() == [[10.0, 20.0, 10.0, 10.0, 10.0]]
    assert got["e"].tolist() == [[2.0, 0.0, 2.0, 3.0, 2.0]]


# reductions ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("reduction", sorted(REDUCTIONS))
def test_reductions_float64(reduction):
    prog = coda.compile(f"EPILOGUE (t: tile) {{ output = input; red = {reduction}(input * t - 1); }}")
    for i, (m, n, k) in enumerate(SHAPES):
        a, b = launch_inputs(m, n, k, seed=500 + i)
        t = random_values((m, n), "any", torch.Generator().manual_seed(i))
        got = prog.reference(a, b, t=t)
        x = np64(a) @ np64(b) * np64(t) - 1
        want = REDUCTIONS[reduction](x)
        assert got["red"].dtype == torch.float64
        assert got["red"].shape == ((m,) if reduction.startswith("row") else (n,))
        assert_close64(got["red"], want, atol=1e-12 * max(1.0, np.abs(x).sum()))
        assert_close64(got["output"], np64(a) @ np64(b))


@pytest.mark.parametrize("reduction", sorted(REDUCTIONS))
def test_reductions_float32_are_float32(reduction):
    prog = coda.compile(f"output = input; red = {reduction}(input);")
    a, b = launch_inputs(6, 11, 5, seed=3, dtype=torch.float32)
    got = prog.reference(a, b)
    assert got["red"].dtype == torch.float32
    want = REDUCTIONS[reduction](np64(a) @ np64(b))
    tol = 64 * 5 * 11 * 2.0**-24
    np.testing.assert_allclose(np64(got["red"]), want, rtol=tol, atol=tol)
    half = prog.reference(a.half(), b.half())
    assert half["output"].dtype == torch.float16 and half["red"].dtype == torch.float32


def test_row_logsumexp_is_stable_for_large_values():
    prog = coda.compile("output = input; lse = row_logsumexp(input * 1000);")
    a, b = launch_inputs(4, 9, 3, seed=5)
    got = prog.reference(a, b)["lse"]
    x = np64(a) @ np64(b) * 1000
    assert np.isfinite(np64(got)).all()
    assert_close64(got, REDUCTIONS["row_logsumexp"](x))


@pytest.mark.parametrize(("m", "n"), [(0, 5), (4, 0)])
def test_reductions_over_no_values(m, n):
    """An empty row (N = 0) or column (M = 0) sums to 0 and has maximum and log-sum-exp -inf, as
    the kernels give (torch.amax refuses an empty dimension); also for a map."""
    prog = coda.compile("output = input; rs = row_sum(input); cs = col_sum(input);"
                        " rm = row_max(input); cm = col_max(input); lse = row_logsumexp(input);")
    a, b = launch_inputs(m, n, 3, seed=1)
    for got in (prog.reference(a, b), prog.map(torch.ones(m, n, dtype=torch.float64), backend="reference")):
        assert got["output"].shape == (m, n)
        assert got["rs"].tolist() == [0.0] * m and got["cs"].tolist() == [0.0] * n
        assert got["rm"].tolist() == [-math.inf] * m and got["lse"].tolist() == [-math.inf] * m
        assert got["cm"].tolist() == [-math.inf] * n


def test_limits_on_meta_tensors_run_the_launch_whole():
    """A meta m_limit or k_limit has no value to read back (shape propagation through the LM
    head's cross-entropy, which launches with them): the launch runs whole, shapes only."""
    prog = coda.compile("output = input; s = row_sum(input);")
    a, b = torch.empty(8, 4, device="meta"), torch.empty(4, 6, device="meta")
    limit = torch.ones(1, dtype=torch.int64, device="meta")
    outs = prog.reference(a, b, m_limit=limit, k_limit=limit)
    assert outs["output"].shape == (8, 6) and outs["s"].shape == (8,) and outs["s"].is_meta


def test_reductions_of_broadcast_values_cover_the_whole_tile():
    prog = coda.compile("output = input; a = row_sum(r); b = col_sum(2); c = col_max(r); d = row_max(c2);")
    m, n = 5, 3
    a, b = launch_inputs(m, n, 2, seed=0)
    r = torch.arange(m, dtype=torch.float64)
    c2 = torch.tensor([1.0, 7.0, -2.0], dtype=torch.float64)
    got = prog.reference(a, b, r=r, c2=c2)
    assert got["a"].tolist() == (r * n).tolist()
    assert got["b"].tolist() == [2.0 * m] * n
    assert got["c"].tolist() == [float(m - 1)] * n
    assert got["d"].tolist() == [7.0] * m


# unpack and rope -------------------------------------------------------------------------------------


@pytest.mark.parametrize("m, n, k", [(5, 8, 3), (1, 2, 1), (7, 18, 9), (4, 4, 4)])
def test_unpack_pairs(m, n, k):
    prog = coda.compile("EPILOGUE (r: row, c: col) {\n  gate, up = unpack(input * r);\n"
                        "  output = silu(gate) * up + c;\n  save g = gate;\n  save u = up;\n"
                        "  sc = col_sum(up);\n  sr = row_max(gate);\n}")
    a, b = launch_inputs(m, n, k, seed=n)
    g = torch.Generator().manual_seed(m)
    r = random_values((m,), "any", g)
    c = random_values((n // 2,), "any", g)
    got = prog.reference(a, b, r=r, c=c)
    x = np64(a) @ np64(b) * np64(r)[:, None]
    gate, up = unpack(x)
    assert gate.shape == (m, n // 2)
    silu = ELEMENTWISE["silu"][0]
    assert_close64(got["output"], silu(gate) * up + np64(c)[None, :])
    assert_close64(got["g"], gate)
    assert_close64(got["u"], up)
    assert_close64(got["sc"], up.sum(axis=0))
    assert_close64(got["sr"], gate.max(axis=1))
    for key in ("output", "g", "u"):
        assert got[key].shape == (m, n // 2)


@pytest.mark.parametrize("m, n, k", [(5, 8, 3), (1, 1, 1), (7, 18, 9)])
def test_pack_interleaves_columns(m, n, k):
    prog = coda.compile("EPILOGUE (t: tile) { output = pack(input * t, input - 2.0); save t2 = t; }")
    a, b = launch_inputs(m, n, k, seed=k)
    t = random_values((m, n), "any", torch.Generator().manual_seed(n))
    got = prog.reference(a, b, t=t)
    x = np64(a) @ np64(b)
    want = np.empty((m, 2 * n))
    want[:, 0::2], want[:, 1::2] = x * np64(t), x - 2.0
    assert got["output"].shape == (m, 2 * n)
    assert_close64(got["output"], want)
    if n % 2 == 0:   # pack undoes unpack
        again = coda.compile("g, u = unpack(input); output = pack(g, u);").reference(a, b)["output"]
        assert_close64(again, x)


@pytest.mark.parametrize("m, n, k, h", [(3, 8, 2, 4), (5, 12, 1, 2), (1, 6, 7, 1), (4, 10, 3, 7),
                                        (6, 2, 5, 1)])
def test_rope_interleaved_pairs_with_head_tables(m, n, k, h):
    prog = coda.compile("output = rope(input + bias, cos, sin);")
    a, b = launch_inputs(m, n, k, seed=h)
    g = torch.Generator().manual_seed(n)
    angle = torch.rand(m, h, generator=g, dtype=torch.float64) * 6.3
    bias = random_values((n,), "any", g)
    cos, sin = torch.cos(angle), torch.sin(angle)
    got = prog.reference(a, b, bias=bias, cos=cos, sin=sin)["output"]
    x = np64(a) @ np64(b) + np64(bias)[None, :]
    assert_close64(got, rope(x, np64(cos), np64(sin)))
    # a rotation: each pair keeps its length
    pairs = np64(got).reshape(m, n // 2, 2)
    np.testing.assert_allclose((pairs**2).sum(-1), (x.reshape(m, n // 2, 2) ** 2).sum(-1), rtol=1e-12)


def test_rope_pair_uses_column_j_mod_h():
    # x = [1, 0] in every pair, cos = 0 and sin = column index: pair j becomes (0, j % H)
    m, n, h = 2, 10, 3
    eye = torch.eye(m, dtype=torch.float64)
    x = torch.zeros(m, n, dtype=torch.float64)
    x[:, 0::2] = 1
    cos = torch.zeros(m, h, dtype=torch.float64)
    sin = torch.arange(h, dtype=torch.float64).repeat(m, 1) + 1
    got = coda.compile("output = rope(input, c, s);").reference(eye, x, c=cos, s=sin)["output"]
    assert got[:, 0::2].abs().max() == 0
    assert got[0, 1::2].tolist() == [float(j % h + 1) for j in range(n // 2)]


def test_rope_in_the_pair_domain():
    prog = coda.compile("g, u = unpack(input);\noutput = rope(g, cs, sn) * u;")
    m, n, h = 3, 8, 2
    a, b = launch_inputs(m, n, 4, seed=9)
    angle = torch.rand(m, h, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    got = prog.reference(a, b, cs=angle.cos(), sn=angle.sin())["output"]
    gate, up = unpack(np64(a) @ np64(b))
    assert_close64(got, rope(gate, np64(angle.cos()), np64(angle.sin())) * up)


def test_a_constant_of_both_domains_is_whole_where_pack_rope_and_dropout_read_it():
    """`1.0` is one node (CSE) that `input + 1.0` reads in [M, N] and a pairwise op or dropout in
    the pair domain, [M, N/2]: each reads it as a tile of its own domain."""
    m, n = 5, 8
    a, b = launch_inputs(m, n, 3, seed=4)
    g = torch.Generator().manual_seed(5)
    cos, sin = random_values((m, 2), "any", g), random_values((m, 2), "any", g)
    gate = unpack(np64(a) @ np64(b))[0]
    packed = np.empty((m, n))
    packed[:, 0::2], packed[:, 1::2] = gate, 1.0
    cases = {"output = pack(g, 1.0);": packed,
             "output = g + rope(1.0, cos, sin);": gate + rope(np.ones((m, n // 2)), np64(cos), np64(sin)),
             "output = g + dropout(1.0, 0.5);": gate + 2.0 * dropout_mask_from_rng(7, 0.5, m, n // 2)}
    for body, want in cases.items():
        prog = coda.compile("EPILOGUE(cos: head, sin: head) { g, u = unpack(input); save s = input + 1.0; "
                            f"{body} }}")
        got = prog.reference(a, b, cos=cos, sin=sin, seed=7)
        assert_close64(got["output"], want)
        assert_close64(got["s"], np64(a) @ np64(b) + 1.0)


# dropout on the reference backend ----------------------------------------------------------------------


@pytest.mark.parametrize("m, n, k, p, seed", [(5, 7, 3, 0.1, 0), (13, 6, 1, 0.5, 12345),
                                              (1, 9, 4, 0.9, 2**32 - 1), (31, 17, 65, 0.3, 7)])
def test_dropout_matches_the_rng_mask(m, n, k, p, seed):
    prog = coda.compile("output = dropout(gelu(input), p);")
    a, b = launch_inputs(m, n, k, seed=m)
    got = prog.reference(a, b, p=p, seed=seed)["output"]
    x = ELEMENTWISE["gelu"][0](np64(a) @ np64(b))
    keep = dropout_mask_from_rng(seed, p, m, n)
    assert_close64(got, np.where(keep, x / (1 - p), 0.0))


def test_dropout_statistics():
    m, n, p = 240, 250, 0.3
    prog = coda.compile("output = dropout(input, p);")
    a = torch.ones(m, 1, dtype=torch.float64)
    b = torch.rand(1, n, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) + 1
    got = prog.reference(a, b, p=p, seed=2024)["output"]
    kept = got != 0
    frac = kept.double().mean().item()
    sigma = math.sqrt(p * (1 - p) / (m * n))
    assert abs(frac - (1 - p)) < 5 * sigma
    expected = (a @ b) * (1 / (1 - torch.tensor(p, dtype=torch.float64)))   # the scale, rounded once
    assert torch.equal(got[kept], expected[kept])
    # each row and column on its own is near 1 - p too (no striping)
    rows = kept.double().mean(1)
    cols = kept.double().mean(0)
    assert (rows - (1 - p)).abs().max() < 6 * math.sqrt(p * (1 - p) / n)
    assert (cols - (1 - p)).abs().max() < 6 * math.sqrt(p * (1 - p) / m)
    # different seeds give (nearly) independent masks
    other = prog.reference(a, b, p=p, seed=2025)["output"] != 0
    agree = (kept == other).double().mean().item()
    assert abs(agree - ((1 - p) ** 2 + p**2)) < 5 * math.sqrt(0.5 * 0.5 / (m * n))


def test_dropout_mask_does_not_depend_on_the_launch_size():
    small_m, small_n, big_m, big_n, k = 7, 9, 40, 33, 3
    a, b = launch_inputs(big_m, big_n, k, seed=1)
    prog = coda.compile("output = dropout(input, 0.4);\nsave kept = dropout(1 + input * 0, 0.4);")
    big = prog.reference(a, b, seed=99)
    small = prog.reference(a[:small_m].clone(), b[:, :small_n].clone(), seed=99)
    assert torch.equal(big["kept"][:small_m, :small_n], small["kept"])
    assert torch.equal(big["output"][:small_m, :small_n] != 0, small["output"] != 0)
    torch.testing.assert_close(big["output"][:small_m, :small_n], small["output"], rtol=1e-14, atol=1e-14)


def test_dropout_same_seed_same_mask_and_p_edges():
    prog = coda.compile("output = dropout(input, p);")
    a, b = launch_inputs(8, 12, 3, seed=4)
    first = prog.reference(a, b, p=0.5, seed=3)["output"]
    assert torch.equal(first, prog.reference(a, b, p=0.5, seed=3)["output"])
    assert not torch.equal(first, prog.reference(a, b, p=0.5, seed=4)["output"])
    assert torch.equal(prog.reference(a, b, p=0.0, seed=3)["output"], a @ b)
    assert torch.equal(prog.reference(a, b, p=1.0, seed=3)["output"], torch.zeros(8, 12, dtype=torch.float64))
    # the seed is taken mod 2**32
    assert torch.equal(prog.reference(a, b, p=0.5, seed=2**32 + 3)["output"], first)
    assert torch.equal(prog.reference(a, b, p=0.5, seed=-1)["output"],
                       prog.reference(a, b, p=0.5, seed=2**32 - 1)["output"])


def test_dropout_in_the_pair_domain_uses_pair_coordinates():
    m, n, p, seed = 6, 10, 0.5, 17
    prog = coda.compile("g, u = unpack(input);\noutput = dropout(g, p) * u;")
    a, b = launch_inputs(m, n, 3, seed=2)
    got = prog.reference(a, b, p=p, seed=seed)["output"]
    gate, up = unpack(np64(a) @ np64(b))
    keep = dropout_mask_from_rng(seed, p, m, n // 2)
    assert_close64(got, np.where(keep, gate / (1 - p), 0.0) * up)


def test_dropout_float32():
    m, n, k, p = 9, 14, 5, 0.25
    prog = coda.compile("output = dropout(input, p);")
    a, b = launch_inputs(m, n, k, seed=8, dtype=torch.float32)
    got = prog.reference(a, b, p=p, seed=5)["output"]
    keep = dropout_mask_from_rng(5, p, m, n)
    want = np.where(keep, np64(a) @ np64(b) / (1 - p), 0.0)
    tol = 32 * k * 2.0**-24
    np.testing.assert_allclose(np64(got), want, rtol=tol, atol=tol)
    assert ((np64(got) != 0) == (keep & (want != 0))).all()


# outputs, dtypes, out= ---------------------------------------------------------------------------------


def test_outputs_default_to_the_dtype_of_a_and_out_dtype_overrides():
    prog = coda.compile("output = input * 2;\nsave h = input;\ns = row_sum(input);")
    a, b = launch_inputs(4, 6, 3, seed=0, dtype=torch.float32)
    outs = prog.reference(a, b)
    assert [outs[k].dtype for k in ("output", "h", "s")] == [torch.float32, torch.float32, torch.float32]
    outs = prog.reference(a, b, out_dtype=torch.bfloat16)
    assert [outs[k].dtype for k in ("output", "h", "s")] == [torch.bfloat16, torch.bfloat16, torch.float32]
    outs = prog.reference(a.half(), b.half())
    assert outs["output"].dtype == torch.float16
    torch.testing.assert_close(outs["output"].float(), (a.half().float() @ b.half().float()) * 2,
                               rtol=1e-3, atol=1e-3)
    assert list(outs) == ["output", "h", "s"]


def test_transposed_operands_need_no_copy():
    prog = coda.compile("output = input + 1;")
    a, b = launch_inputs(5, 7, 3, seed=0)
    at, bt = a.t().contiguous().t(), b.t().contiguous().t()
    assert not at.is_contiguous() and not bt.is_contiguous()
    assert_close64(prog.reference(at, bt)["output"], np64(a) @ np64(b) + 1)


def test_out_is_written_completely_not_read():
    prog = coda.compile("output = gelu(input) + r;\nsave h = input;")
    m, n = 5, 7
    a, b = launch_inputs(m, n, 3, seed=1)
    r = torch.randn(m, dtype=torch.float64)
    out = torch.full((m, n), float("nan"), dtype=torch.float64)
    res = prog.reference(a, b, r=r, out=out)
    assert res["output"] is out
    assert not torch.isnan(out).any()
    assert_close64(out, ELEMENTWISE["gelu"][0](np64(a) @ np64(b)) + np64(r)[:, None])


def test_out_poisoned_in_the_pair_domain():
    prog = coda.compile("g, u = unpack(input);\noutput = g * u;")
    m, n = 3, 6
    a, b = launch_inputs(m, n, 2, seed=1)
    out = torch.full((m, n // 2), float("nan"), dtype=torch.float32)
    prog.reference(a.float(), b.float(), out=out)
    gate, up = unpack(np64(a.float()) @ np64(b.float()))
    np.testing.assert_allclose(np64(out), gate * up, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("m, n, k", [(5, 7, 3), (1, 1, 1), (16, 9, 4)])
def test_accumulate_into_out(m, n, k):
    prog = coda.compile("output += input;")
    a, b = launch_inputs(m, n, k, seed=m * n)
    prior = torch.randn(m, n, dtype=torch.float64)
    out = prior.clone()
    res = prog.reference(a, b, out=out)
    assert res["output"] is out
    assert_close64(out, np64(prior) + np64(a) @ np64(b))
    prog.reference(a, b, out=out)                  # twice: gradient accumulation
    assert_close64(out, np64(prior) + 2 * (np64(a) @ np64(b)))


def test_saved_values_of_out_are_the_values_before_the_launch_wrote_it():
    """A saved prior, a tile operand that is `out=` itself (an in-place residual add) and a
    map's input written in place: each saved output keeps what `out` held before the launch."""
    a, b = launch_inputs(5, 7, 3, seed=4)
    before = torch.randn(5, 7, dtype=torch.float64)
    prior = coda.compile("save prev = output;\noutput = input;")
    out = before.clone()
    assert_close64(prior.reference(a, b, out=out)["prev"], np64(before))
    assert_close64(out, np64(a) @ np64(b))
    residual = coda.compile("EPILOGUE (x: tile) { save old = x; output = input + x; }")
    x = before.clone()
    assert_close64(residual.reference(a, b, x=x, out=x)["old"], np64(before))
    assert_close64(x, np64(a) @ np64(b) + np64(before))
    double = coda.compile("save keep = input;\noutput = input * 2;")
    x = before.clone()
    assert_close64(double.map(x, out=x, backend="reference")["keep"], np64(before))
    assert_close64(x, 2 * np64(before))


def test_accumulate_with_scaling_saves_and_pairs():
    prog = coda.compile("EPILOGUE (beta: scalar) {\n  g, u = unpack(input);\n"
                        "  output = output * beta + g * u;\n  save old = output;\n}")
    m, n = 4, 10
    a, b = launch_inputs(m, n, 3, seed=3)
    prior = torch.randn(m, n // 2, dtype=torch.float64)
    out = prior.clone()
    res = prog.reference(a, b, beta=0.5, out=out)
    gate, up = unpack(np64(a) @ np64(b))
    want = np64(prior) * 0.5 + gate * up
    assert_close64(out, want)
    assert_close64(res["old"], want)


def test_accumulate_traced_function():
    def grad_acc(acc, output):
        return output + acc

    prog = coda.epilogue(grad_acc)
    a, b = launch_inputs(3, 4, 2, seed=0)
    out = torch.ones(3, 4, dtype=torch.float64)
    prog.reference(a, b, out=out)
    assert_close64(out, 1 + np64(a) @ np64(b))


def test_auto_backend_on_cpu_is_the_reference(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    prog = coda.compile("output = silu(input) * 3;")
    a, b = launch_inputs(4, 5, 2, seed=0)
    assert torch.equal(prog(a, b)["output"], prog.reference(a, b)["output"])
    assert torch.equal(prog(a, b, backend="auto")["output"], prog(a, b, backend="reference")["output"])


def test_explain_without_tensors():
    prog = coda.compile("EPILOGUE k(bias: col) { g, u = unpack(input + bias); output = g * u; "
                        "s = row_sum(g); }")
    text = prog.explain()
    assert "# IR after passes" in text and "epilogue k(bias: col)" in text
    assert "output: tile [M, N/2]" in text and "s: row_sum [M]" in text
    assert repr(prog) == "<coda.Program k(bias: col) -> output, s>"
    a, b = launch_inputs(4, 6, 3, seed=0)
    with pytest.raises(coda.LaunchError, match=r"explain\(a=, b=, bias=\) without example tensors"):
        prog.explain(a=a, b=b, bias=torch.zeros(6))   # A and B go by position: not a silent IR


def test_explain_with_cpu_tensors_needs_neither_cuda_nor_the_interpreter(monkeypatch):
    """`explain(a, b)` shows the kernel a launch on those tensors would run; on the CPU that is
    the interpreter's, whether or not the interpreter is switched on."""
    # Triton fixes a @triton.jit function's mode when it is defined: the helpers a generated
    # kernel imports must load under the interpreter first, or every interpreter test after
    # this one in the process fails
    importlib.import_module("coda.codegen.tl_math")
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    prog = coda.compile("output = gelu(input + bias);")
    a, b = launch_inputs(8, 6, 4, seed=0, dtype=torch.float32)
    text = prog.explain(a, b, bias=torch.zeros(6))
    assert "bias: col" in text and "# Triton kernel (portable mainloop)" in text
    assert "def coda_gemm_" in text
    # a launch's keywords as they are, backend= among them (it was bound as an operand)
    assert prog.explain(a, b, bias=torch.zeros(6), backend="reference") == text
    assert prog.bind(a, b, bias=torch.zeros(6), backend="triton").kinds == {"bias": "col"}


def test_operands_named_a_b_and_self_reach_every_entry_point():
    """The tensors A and B are positional-only everywhere, so operands may take their names."""
    prog = coda.compile("EPILOGUE(a: col, b: row, self: scalar) { output = input * a + b * self; }")
    x, w = launch_inputs(8, 6, 4, seed=0, dtype=torch.float32)
    operands = {"a": torch.randn(6), "b": torch.randn(8), "self": 2.0}
    want = (x.double() @ w.double()) * operands["a"].double() + operands["b"].double()[:, None] * 2.0
    got = prog.reference(x, w, **operands)["output"].double()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    text = prog.explain(x, w, **operands)
    assert "a: col" in text and "b: row" in text and "self: scalar" in text


@pytest.mark.parametrize("backend", ["reference", "triton"])
def test_a_launch_is_outside_autograd_on_every_backend(backend):
    """Inputs that require grad are read as values and `out=` (a leaf that requires grad) is
    written in place on both backends alike: the reference's outputs had carried a graph, and
    its write into such an `out=` had raised torch's error, where Triton's did neither."""
    prog = coda.compile("EPILOGUE(bias: col) { output = input + bias; s = row_sum(output); }")
    g = torch.Generator().manual_seed(4)
    a, b = torch.randn(5, 4, generator=g, requires_grad=True), torch.randn(4, 6, generator=g)
    bias = torch.randn(6, generator=g, requires_grad=True)
    outs = prog(a, b, bias=bias, backend=backend)
    assert not any(t.requires_grad or t.grad_fn for t in outs.values())
    out = torch.full((5, 6), float("nan"), requires_grad=True)
    assert prog(a, b, bias=bias, out=out, backend=backend)["output"] is out
    want = a.detach().double() @ b.double() + bias.detach().double()
    torch.testing.assert_close(out.detach().double(), want, rtol=1e-5, atol=1e-5)
