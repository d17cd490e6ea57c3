"""Which reductions need no mask past the output's edge (passes/edges.py), and the generated code."""

from __future__ import annotations

import pytest

import coda
from coda.codegen.epilogue import Signature, generate_epilogue
from coda.passes.edges import zero_past_edge

KINDS = {"residual": "tile", "pre": "tile", "bias": "col", "rstd": "row", "p": "scalar"}


def _value(expression: str):
    """The node of `expression` (an expression of input and the operands of KINDS)."""
    prog = coda.compile(f"EPILOGUE(residual: tile, pre: tile, bias: col, rstd: row, p: scalar) "
                        f"{{ output = input; s = row_sum({expression}); }}")
    return next(o.value for o in prog.ir.outputs if o.name == "s")


@pytest.mark.parametrize(("expression", "past_n", "past_m"), [
    ("(input + residual) * (input + residual)", True, True),
    ("input * gelu_grad(pre)", True, True),          # gelu_grad(0) = 0.5: finite
    ("input + bias", True, False),                   # a column operand is zero past N only
    ("input * rstd", False, True),                   # rstd past N: not known to be finite
    ("rstd * bias", False, False),
    ("dropout(gelu(input), p) + residual", True, True),
    ("exp(input)", False, False),                    # exp(0) = 1
    ("input * rsqrt(pre)", False, False),            # rsqrt(0) = inf: 0 * inf is NaN
    ("input * (pre + 1.0)", True, True),
    ("where(input > 0.0, input, residual)", True, True),
    ("input - 2.0", False, False),
])
def test_zero_past_edge(expression, past_n, past_m):
    node = _value(expression)
    assert zero_past_edge(node, "col", KINDS, input_zero=True) == past_n
    assert zero_past_edge(node, "row", KINDS, input_zero=True) == past_m


def test_a_long_chain_is_walked_without_recursion():
    """`row_sum(input + residual + ... )` of 2000 terms: the pass recursed down the chain (three
    frames a node), so a launch of a program that compiled raised RecursionError."""
    node = _value("input" + " + residual" * 2000)
    assert zero_past_edge(node, "col", KINDS, input_zero=True)
    with_row = _value("input" + " + residual" * 2000 + " + rstd")
    assert not zero_past_edge(with_row, "col", KINDS, input_zero=True)


def test_a_portable_accumulator_is_not_zero_past_the_edge():
    """The portable mainloop wraps rows and columns around: its accumulator holds data there."""
    node = _value("(input + residual) * (input + residual)")
    assert not zero_past_edge(node, "col", KINDS, input_zero=False)
    assert zero_past_edge(_value("residual * pre"), "col", KINDS, input_zero=False)


def test_generated_sums_drop_the_selects_they_do_not_need():
    prog = coda.compile("EPILOGUE(pre: tile) { output = input * gelu_grad(pre); db = col_sum(output);"
                        " m = row_max(output); lse = row_logsumexp(input); }")
    sig = Signature(kinds=(("pre", "tile"),), scalar_tensors=frozenset(),
                    outputs=("output", "db", "m", "lse"))
    tma = generate_epilogue(prog, sig, input_zero=True)
    assert "db_tile = tl.broadcast_to" in tma                      # a sum of zeros past M
    assert "m_tile = tl.where(mask_n[None, :]" in tma             # a maximum is always masked,
    assert "lse_tile = tl.where(mask_n[None, :]" in tma           # on the reduced axis only
    portable = generate_epilogue(prog, sig, input_zero=False)
    assert "db_tile = tl.where(mask_m[:, None]" in portable
