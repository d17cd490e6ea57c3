"""coda.Partials: row sums a launch leaves unfinished (`unfinished=`: its tiles' partials, no
finishing kernel) and a program that takes them as a row or column operand, adding each value's
parts as it loads them.

Through the Triton interpreter (the real portable and map kernels, whose 32-column tiles give
a width of 100 four parts) and the reference backend, in float32 against float64 formulas: the
parts add up to the row sums; a GEMM and a map reading them equal the same launch given the
sums; the cached relaunch; a launch under `m_limit`; and the errors.
"""

from __future__ import annotations

import pytest
import torch

import coda
from coda.codegen import kernel as kernel_module

STATS = coda.compile("EPILOGUE(bias: col) { output = input + bias; ss = row_sum(output * output);"
                     " s = row_sum(output); c = col_sum(output); }")
NORM = coda.compile("EPILOGUE(s: row, ss: row, inv_n: scalar) { m = s * inv_n;"
                    " output = (input - m) * rsqrt(ss * inv_n - m * m + 1e-5); }")
TOL = 2e-5   # float32 sums of ~100 values, relative to their scale


def inputs(m=70, k=48, n=100, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(m, k, generator=g), torch.randn(k, n, generator=g), torch.randn(n, generator=g)


def close(got: torch.Tensor, want: torch.Tensor, tol: float = TOL) -> bool:
    scale = max(want.abs().max().item(), 1.0)
    return (got.double() - want).abs().max().item() <= tol * scale


@pytest.mark.parametrize("backend, parts", [("triton", 4), ("reference", 1)])
def test_unfinished_row_sums_add_up(backend, parts):
    """The parts of an unfinished row sum (one per 32-column tile through the interpreter, the
    sum itself on the reference backend) add up to the row sum; the finished outputs beside
    them (a column sum) are unchanged."""
    a, b, bias = inputs()
    y = a.double() @ b.double() + bias.double()
    for _ in range(2):   # the plan, then its cached relaunch
        outs = STATS(a, b, backend=backend, bias=bias, unfinished=["ss", "s"])
        for name, want in (("ss", (y * y).sum(1)), ("s", y.sum(1))):
            got = outs[name]
            assert isinstance(got, coda.Partials) and got.parts.shape == (parts, 70)
            assert got.shape == (70,) and got.parts.dtype == torch.float32
            assert close(got.total(), want), name
        assert close(outs["c"], y.sum(0)) and close(outs["output"], y)


@pytest.mark.parametrize("backend", ["triton", "reference"])
def test_a_program_reads_row_partials(backend):
    """A GEMM and a map given the parts as row operands give what they give with the sums: the
    kernels add each row's parts as they load them."""
    a, b, bias = inputs()
    outs = STATS(a, b, backend=backend, bias=bias, outputs=["output", "ss", "s"], unfinished=["ss", "s"])
    y = a.double() @ b.double() + bias.double()
    s, ss, n = y.sum(1), (y * y).sum(1), y.shape[1]
    mean = s / n
    want_map = (y - mean[:, None]) * torch.rsqrt(ss / n - mean * mean + 1e-5)[:, None]
    for _ in range(2):
        got = NORM.map(outs["output"], backend=backend, s=outs["s"], ss=outs["ss"], inv_n=1.0 / n)
        assert close(got["output"], want_map, 1e-4)
    g = torch.Generator().manual_seed(3)
    a2, b2 = torch.randn(70, 40, generator=g), torch.randn(40, 24, generator=g)   # a GEMM of 70 rows
    z = a2.double() @ b2.double()
    for _ in range(2):
        got = NORM(a2, b2, backend=backend, s=outs["s"], ss=outs["ss"], inv_n=1.0 / n)["output"]
        assert close(got, (z - mean[:, None]) * torch.rsqrt(ss / n - mean * mean + 1e-5)[:, None], 1e-4)


def test_parts_given_by_hand_in_any_number():
    """Partials made by hand: one part, three, eight (the count is an argument of one
    kernel), a [P, M] view with strides (1, 3); each as the summed vector would give."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(40, 64, generator=g)
    for parts in (1, 3, 8):
        s = torch.randn(parts, 40, generator=g)
        ss = torch.rand(parts, 40, generator=g) * 50 + 50 * parts
        want = NORM.map(x, backend="reference", s=s.sum(0), ss=ss.sum(0), inv_n=1 / 64)["output"]
        got = NORM.map(x, s=coda.Partials(s), ss=coda.Partials(ss), inv_n=1 / 64)["output"]
        assert close(got, want.double(), 1e-5), parts
    wide = torch.randn(40, 3, generator=g).T   # [3, 40] with stride (1, 3)
    got = NORM.map(x, s=coda.Partials(wide), ss=coda.Partials(wide * 0 + 200), inv_n=1 / 64)["output"]
    want = NORM.map(x, backend="reference", s=wide.sum(0), ss=torch.full((40,), 600.0), inv_n=1 / 64)
    assert close(got, want["output"].double(), 1e-5)


@pytest.mark.parametrize("backend", ["triton", "reference"])
def test_a_column_operand_reads_row_partials(backend):
    """The row sums of one launch as another's column operand (LayerNorm's weight fold: u and cv,
    row sums of the folded weight, are the folded GEMM's column vectors): the parts of each
    column's value added as the epilogue loads them."""
    g = torch.Generator().manual_seed(7)
    w, a, b = (torch.randn(*shape, generator=g) for shape in ((100, 64), (70, 48), (48, 100)))
    sums = coda.compile("EPILOGUE { output = input; u = row_sum(input); }")
    u = sums.map(w, backend=backend, outputs=["u"], unfinished=["u"])["u"]
    assert u.shape == (100,) and u.parts.shape[0] == (1 if backend == "reference" else 2)
    for _ in range(2):
        got = STATS(a, b, backend=backend, bias=u, outputs=["output", "c"])
        y = a.double() @ b.double() + w.double().sum(1)
        assert close(got["output"], y) and close(got["c"], y.sum(0))


@pytest.mark.parametrize("backend", ["triton", "reference"])
def test_unfinished_column_sums_of_a(backend, monkeypatch):
    """`a_col_sums=True, unfinished=["a_col_sums"]`: A's column sums as Partials over the row
    blocks (3 of 32 rows for 70 under the interpreter), no finishing kernel for them; the
    launch's other reductions still finished, right."""
    calls = []
    finisher = kernel_module._Finisher.__call__
    monkeypatch.setattr(kernel_module._Finisher, "__call__", lambda self, buffers, device:
                        calls.append(len(buffers)) or finisher(self, buffers, device))
    a, b, bias = inputs(seed=3)
    y = a.double() @ b.double() + bias.double()
    for outputs, finished in ((["output"], []), (["output", "c"], [3])):
        calls.clear()
        outs = STATS(a, b, backend=backend, bias=bias, outputs=outputs, a_col_sums=True,
                     unfinished=["a_col_sums"])
        sums = outs["a_col_sums"]
        assert isinstance(sums, coda.Partials) and sums.parts.shape == ((3 if backend == "triton" else 1), 48)
        assert close(sums.total(), a.double().sum(0)) and close(outs["output"], y)
        assert calls == (finished if backend == "triton" else [])
        if "c" in outputs:
            assert close(outs["c"], y.sum(0))


def test_unfinished_launch_runs_no_finishing_kernel(monkeypatch):
    """With every reduction of a launch left unfinished no finishing kernel runs; with some,
    the finishing kernel merges only the others."""
    calls = []
    original = kernel_module._Finisher.__call__
    monkeypatch.setattr(kernel_module._Finisher, "__call__", lambda self, buffers, device:
                        calls.append(len(buffers)) or original(self, buffers, device))
    a, b, bias = inputs(seed=1)
    STATS(a, b, bias=bias, outputs=["output", "ss", "s"], unfinished=["ss", "s"])
    assert calls == []
    STATS(a, b, bias=bias, outputs=["output", "ss", "s", "c"], unfinished=["ss", "s"])
    assert calls == [3]   # the M limit's pointer, c's partials and c


def test_row_partials_under_a_row_limit():
    """Under m_limit the rows before the limit are right, read from the parts; the others are not
    written."""
    a, b, bias = inputs(seed=2)
    outs = STATS(a, b, bias=bias, outputs=["output", "ss", "s"], unfinished=["ss", "s"])
    poison = torch.full((70, 100), 123.0)
    limit = torch.tensor([37])
    got = NORM.map(outs["output"], s=outs["s"], ss=outs["ss"], inv_n=0.01, out=poison,
                   m_limit=limit)["output"]
    want = NORM.map(outs["output"], backend="reference", s=outs["s"].total(), ss=outs["ss"].total(),
                    inv_n=0.01)["output"]
    assert close(got[:37], want[:37].double(), 1e-5)
    assert (got[37:] == 123.0).all()


def test_unfinished_sums_of_nothing_are_zero():
    """N = 0 (no column tile) or M = 0 (no row block): the unfinished sums are one part of zeros,
    as the finished ones are zeros."""
    s = STATS.map(torch.randn(5, 0), bias=torch.zeros(0), outputs=["s"], unfinished=["s"])["s"]
    assert s.parts.shape == (1, 5) and not s.total().any()
    a, b, _ = inputs()
    sums = STATS(a[:0], b, bias=torch.zeros(100), outputs=["output"], a_col_sums=True,
                 unfinished=["a_col_sums"])["a_col_sums"]
    assert sums.parts.shape == (1, 48) and not sums.total().any()


@pytest.mark.parametrize("call, message", [
    (lambda a, b, bias: STATS(a, b, bias=bias, unfinished=["output"]), "is not a row sum"),
    (lambda a, b, bias: STATS(a, b, bias=bias, unfinished=["c"]), "it writes: ss, s"),
    (lambda a, b, bias: STATS(a, b, bias=bias, unfinished=["ss"], outputs=["output"]), "not a row sum"),
    (lambda a, b, bias: STATS(a, b, bias=bias, unfinished="ss"), "list of output names"),
    (lambda a, b, bias: STATS(a, b, bias=bias, unfinished=["ss"], dtypes={"ss": torch.float16}),
     "takes no dtype"),
    (lambda a, b, bias: NORM.map(a, s=torch.ones(70), ss=torch.ones(70),
                                 inv_n=coda.Partials(torch.ones(2, 70))), "not a scalar"),
    (lambda a, b, bias: STATS(a, b, bias=coda.Partials(torch.ones(2, 99))), "expected shape [100]"),
    (lambda a, b, bias: NORM.map(a, s=coda.Partials(torch.ones(2, 69)), ss=torch.ones(70), inv_n=1.0),
     "expected shape [70]"),
    (lambda a, b, bias: STATS(a, b, bias=bias, a_col_sums=True, unfinished=["a_col_sums"],
                              m_limit=torch.tensor([3])), "under m_limit"),
    (lambda a, b, bias: coda.Partials(torch.ones(70)), "[P, M] tensor"),
    (lambda a, b, bias: coda.Partials(torch.ones(0, 70)), "[P, M] tensor"),
    (lambda a, b, bias: coda.Partials(torch.ones(2, 70, dtype=torch.int32)), "floating-point"),
])
def test_bad_partials_are_refused(call, message):
    a, b, bias = inputs()
    with pytest.raises(coda.LaunchError, match=message.replace("[", r"\[").replace("]", r"\]")):
        call(a, b, bias)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_parts_are_added_in_float32_on_the_reference_backend(dtype):
    """The kernels add a Partials operand's parts in float32; the reference added them in the
    parts' dtype (bfloat16: 2.0 off at 64 parts). Both now as float32's sum in index order."""
    g = torch.Generator().manual_seed(4)
    parts = (torch.randn(64, 12, generator=g) * 30).to(dtype)
    want = torch.zeros(12)
    for part in parts:
        want += part.float()
    assert torch.equal(coda.Partials(parts).total(), want)
    prog = coda.compile("EPILOGUE (s: row) { output = input * 0.0 + s; }")
    got = prog.map(torch.zeros(12, 3), s=coda.Partials(parts), backend="reference")["output"]
    assert torch.equal(got[:, 0], want)
