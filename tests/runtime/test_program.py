"""runtime/program.py: the key of a Program's cached launch plans (a launch that finds its plan
skips binding, so the key must tell apart every launch bind would treat differently) and the
float32 matmul precision the key and the plans read."""

from __future__ import annotations

import pytest
import torch

import coda
from coda.runtime.program import triton_runs_on

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
pytestmark = pytest.mark.skipif(not triton_runs_on(torch.zeros(1, device=DEVICE)),
                                reason="needs TRITON_INTERPRET=1 (set by tests/conftest.py) or a GPU")


def _launch_inputs():
    a, b = torch.randn(8, 4, device=DEVICE), torch.randn(4, 6, device=DEVICE)
    return a, b, torch.randn(6, device=DEVICE)


def test_a_cached_plan_is_not_found_by_options_that_bind_refuses():
    """a_col_sums=1 equals True and outputs="s" iterates as ["s"]: neither may take the plan of
    the launch that passed True or ["s"], which would skip bind's refusal; options that cannot
    be hashed (a list of lists) or iterated are bind's LaunchError, not a TypeError of the key."""
    prog = coda.compile("EPILOGUE(bias: col) { h = input + bias; output = h; s = row_sum(h); }")
    a, b, bias = _launch_inputs()
    for good, bad in ((dict(a_col_sums=True), dict(a_col_sums=1)),
                      (dict(outputs=["s"]), dict(outputs="s")),
                      (dict(unfinished=["s"]), dict(unfinished="s"))):
        prog(a, b, bias=bias, backend="triton", **good)
        with pytest.raises(coda.LaunchError):
            prog(a, b, bias=bias, backend="triton", **bad)
    for bad in (dict(outputs=[["s"]]), dict(unfinished=[["s"]]), dict(a_col_sums=[True]),
                dict(out_dtype=[torch.float32]), dict(backend=["triton"]), dict(outputs=3)):
        with pytest.raises(coda.LaunchError):
            prog(a, b, bias=bias, **{"backend": "triton"} | bad)


@pytest.mark.skipif(not hasattr(torch._C, "_get_fp32_precision_getter"), reason="torch < 2.9")
def test_float32_launches_follow_the_precision_set_through_torchs_newer_api():
    """torch.backends.cuda.matmul.fp32_precision = "tf32" makes torch.get_float32_matmul_precision
    raise, and "ieee" after `set_float32_matmul_precision("high")` leaves it saying "high": a
    float32 launch reads the setting that both write, in its plan's key and in the plan."""
    prog = coda.compile("output = input;")
    a, b, _ = _launch_inputs()
    matmul = torch.backends.cuda.matmul
    before, legacy = matmul.fp32_precision, torch.get_float32_matmul_precision()
    precisions = []
    try:
        for set_precision in (lambda: setattr(matmul, "fp32_precision", "tf32"),
                              lambda: torch.set_float32_matmul_precision("high"),
                              lambda: setattr(matmul, "fp32_precision", "ieee")):
            set_precision()
            prog(a, b, backend="triton")
            precisions.append(next(reversed(prog._plans.values())).meta["DOT_PRECISION"])
    finally:
        matmul.fp32_precision = before
        torch.set_float32_matmul_precision(legacy)
    assert precisions == ["tf32", "tf32", "tf32x3"]


def test_a_negated_view_does_not_find_its_plain_twins_plan():
    """A lazily negated view has its plain twin's shape, strides and dtype: it took the plan the
    twin's launch had cached, skipping bind's refusal, and the kernel read (or, as out=, wrote)
    the negated memory, silently (an audit's find)."""
    prog = coda.compile("EPILOGUE(t: tile) { output = input + t; }")
    a, b, _ = _launch_inputs()
    z = torch.randn(8, 6, dtype=torch.complex64, device=DEVICE)
    prog(a, b, t=z.imag, backend="triton")
    prog(a, b, t=z.imag, out=torch.empty(8, 6, device=DEVICE), backend="triton")
    for bad in (dict(t=z.conj().imag), dict(t=z.imag, out=torch.empty(8, 6, dtype=torch.complex64,
                                                                            device=DEVICE).conj().imag)):
        with pytest.raises(coda.LaunchError, match="is a lazily negated view"):
            prog(a, b, backend="triton", **bad)


def test_bfloat16_beside_a_float_a_is_not_run_by_the_interpreter():
    """backend="auto" looked at A's dtype alone, so a float32 A with a bfloat16 output (out_dtype,
    out=, dtypes=) or operand ran through the interpreter, which truncates where a GPU rounds:
    half the elements differed from the reference. It takes the reference now, and
    backend="triton" refuses it."""
    if DEVICE == "cuda":
        pytest.skip("the interpreter's case")
    prog = coda.compile("EPILOGUE(t: tile) { output = input + t; s = row_sum(input); }")
    a, b, _ = _launch_inputs()
    t = torch.randn(8, 6)
    exact = (a.double() @ b.double() + t.double())
    for options in (dict(out_dtype=torch.bfloat16), dict(out=torch.empty(8, 6, dtype=torch.bfloat16)),
                    dict(dtypes={"s": torch.bfloat16}), dict(t=t.bfloat16())):
        options = {"t": t} | options
        got = prog(a, b, **options)
        want = prog.reference(a, b, **options)
        assert all(torch.equal(got[k], want[k]) for k in want), options
        if "out_dtype" in options:
            assert torch.equal(got["output"], exact.to(torch.bfloat16))   # rounded to nearest
        with pytest.raises(coda.LaunchError, match="bfloat16, which the interpreter does not support"):
            prog(a, b, backend="triton", **options)


def test_a_col_sums_with_no_columns_meets_the_triton_backends_refusals():
    """With N = 0 the column sums of A come from the reference; an explicit backend="triton" went
    there before its own checks, so float64 was accepted at N = 0 and refused at N > 0."""
    prog = coda.compile("EPILOGUE f() { output = input; }")
    a = torch.randn(5, 3, dtype=torch.float64, device=DEVICE)
    for n in (0, 4):
        with pytest.raises(coda.LaunchError, match=r"A has dtype torch\.float64"):
            prog(a, torch.randn(3, n, dtype=torch.float64, device=DEVICE), backend="triton", a_col_sums=True)
    sums = prog(a.float(), torch.randn(3, 0, device=DEVICE), backend="triton", a_col_sums=True)["a_col_sums"]
    torch.testing.assert_close(sums, a.float().sum(0))
