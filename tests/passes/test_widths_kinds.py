"""Column domains (full [M, N], unpacked [M, N/2], packed [M, 2N]), operand-kind inference and
legality checks."""

from __future__ import annotations

import pytest
import torch

import coda
from coda.passes import check, infer_kinds, widths
from coda.passes.kinds import expected_shape
from coda.passes.widths import DOUBLE, FULL, HALF
from oracle import assert_located, dsl_error, launch_inputs

# widths --------------------------------------------------------------------------------------------


def test_unpack_moves_to_the_half_domain():
    prog = coda.compile("gate, up = unpack(input * r);\noutput = silu(gate) * up + c;\n"
                        "save g = gate;\nsg = col_sum(gate);\nsr = row_sum(up);\nsave pre = input * r;")
    w = prog.widths
    assert w.outputs == {"output": HALF, "g": HALF, "sg": HALF, "sr": HALF, "pre": FULL}
    assert w.operands == {"r": frozenset({FULL}), "c": frozenset({HALF})}
    by_op = {n.op: w.nodes[n] for n in prog.ir.nodes()}
    assert by_op["input"] == FULL and by_op["unpack"] == HALF and by_op["silu"] == HALF


def test_adaptive_values_take_the_domain_of_their_users():
    prog = coda.compile("g, u = unpack(input);\nk = r * 2;\noutput = g * k;\nsave full = input + k;\n"
                        "save alone = k;\nsave one = 1 + 2 * s;")
    w = prog.widths
    assert w.operands["r"] == frozenset({FULL, HALF})
    assert w.outputs == {"output": HALF, "full": FULL, "alone": FULL, "one": FULL}


def test_pack_moves_back_or_out_to_the_packed_domain():
    prog = coda.compile("g, u = unpack(input);\noutput = pack(u * c, g) + r;\nsave wide = pack(input, k);\n"
                        "s = row_sum(pack(g, u));")
    w = prog.widths
    assert w.outputs == {"output": FULL, "wide": DOUBLE, "s": FULL}
    assert w.operands == {"c": frozenset({HALF}), "r": frozenset({FULL}), "k": frozenset({FULL})}
    m, n = 3, 4
    a, b = launch_inputs(m, n, 2, seed=1)
    wide = prog.reference(a, b, c=torch.ones(n // 2, dtype=torch.float64), r=1.0, k=2.0)["wide"]
    assert wide.shape == (m, 2 * n)


def test_prior_output_adapts_to_the_new_output():
    prog = coda.compile("g, u = unpack(input);\noutput += g * u;")
    assert prog.widths.outputs["output"] == HALF
    assert prog.ir.accumulates


@pytest.mark.parametrize("source, line, col, fragment", [
    ("g, u = unpack(input);\noutput = g + input;", 2, 12, "mixes an [M, N] value with an [M, N/2]"),
    ("g, u = unpack(input);\noutput = where(g, input, u);", 2, 10, "`where` mixes"),
    ("g, u = unpack(input);\nx, y = unpack(g);\noutput = x;", 2, 8, "already unpacked"),
    ("g, u = unpack(input);\nsave s = output + input;\noutput = g;", 2, 10,
     "prior `output` is used in another"),
    ("w = pack(input, input);\noutput = w * 2;", 2, 12, "can only be stored as an output"),
    ("s = row_sum(pack(input, 1.0));\noutput = input;", 1, 1, "only be stored as a tile output"),
    ("output = pack(input * u, input * g);\ndb = col_sum(output);", 2, 1,
     "launch on an [M, 2N] input and unpack it: a tile operand read there is [M, N]"),
    ("g, u = unpack(input);\noutput = pack(g, input);", 2, 10, "pack's arguments mix"),
    ("output = pack(pack(input, input), input);", 1, 10, "already packed"),
    ("output += pack(input, input);", 1, 1, "can only be stored as an output"),
    # values of their column met in both domains: one node, computed in one domain
    ("v = dropout(r, 0.5);\ng, u = unpack(input + v);\noutput = g * v;", 1, 5, "dropout() is used in both"),
    ("v = rope(r, c, s);\ng, u = unpack(input + v);\noutput = g * v;", 1, 5, "rope() is used in both"),
])
def test_domain_errors_at_compile_time(source, line, col, fragment):
    err = dsl_error(source)
    assert (err.loc.line, err.loc.col) == (line, col)
    assert fragment in str(err) and str(err).splitlines()[-1].strip() == "^"


def test_an_operand_used_in_both_domains_must_not_depend_on_columns():
    prog = coda.compile("g, u = unpack(input);\noutput = g * x;\nsave f = input * x;")
    m, n = 4, 6
    a, b = launch_inputs(m, n, 3, seed=0)
    outs = prog.reference(a, b, x=torch.full((m,), 2.0, dtype=torch.float64))     # a row: fine
    assert torch.equal(outs["f"], (a @ b) * 2)
    outs = prog.reference(a, b, x=3.0)                                           # a scalar: fine
    assert torch.equal(outs["output"], (a @ b)[:, 0::2] * 3)
    with pytest.raises(coda.CodaError, match=r"used with both \[M, N\] values and \[M, N/2\]"):
        prog.reference(a, b, x=torch.ones(m, n, dtype=torch.float64))
    with pytest.raises(coda.LaunchError, match="operand 'x'"):
        prog.reference(a, b, x=torch.ones(m, n // 2, dtype=torch.float64))
    for kind in ("tile", "col"):   # declared so, the program is refused when compiled
        with pytest.raises(coda.DslError) as info:
            coda.compile(f"EPILOGUE (x: {kind}) {{\n g, u = unpack(input);\n output = g * x;\n"
                         " save f = input * x;\n}")
        assert "line 1, column 11" in str(info.value)
        assert f"declared `{kind}` but meets two column domains ([M, N] and [M, N/2])" in str(info.value)


def test_widths_function_on_raw_ir():
    from coda.dsl.lower import lower
    from coda.dsl.parser import parse

    epi = lower(parse("g, u = unpack(input);\noutput = g;\nsave s = input;"))
    w = widths(epi)
    assert w.outputs == {"output": HALF, "s": FULL}


# kinds ----------------------------------------------------------------------------------------------


def _kinds(source: str, m: int, n: int, **values):
    prog = coda.compile(source)
    return infer_kinds(prog.ir, prog.widths, m, n, values)


def test_kinds_from_shapes():
    m, n = 3, 5
    kinds = _kinds("output = input * t + r + c + s + z;", m, n, t=torch.ones(m, n), r=torch.ones(m),
                   c=torch.ones(n), s=2.5, z=torch.tensor(1.0))
    assert kinds == {"t": "tile", "r": "row", "c": "col", "s": "scalar", "z": "scalar"}


def test_kinds_in_the_half_domain():
    m, n = 3, 8
    kinds = _kinds("g, u = unpack(input);\noutput = g * t + c + r;", m, n, t=torch.ones(m, 4),
                   c=torch.ones(4), r=torch.ones(m))
    assert kinds == {"t": "tile", "c": "col", "r": "row"}


def test_declared_kinds_win_and_resolve_ambiguity():
    m = n = 4
    src = "EPILOGUE (v: row, w: col) { output = input * v + w; }"
    assert _kinds(src, m, n, v=torch.ones(4), w=torch.ones(4)) == {"v": "row", "w": "col"}
    traced = coda.epilogue(lambda acc, v: acc * v)
    assert traced.ir.params["v"].kind is None


@pytest.mark.parametrize("m, n, source, shape", [
    (4, 4, "output = input + v;", (4,)),                               # M == N
    (1, 1, "output = input + v;", (1,)),
    (3, 6, "g, u = unpack(input);\noutput = g * v;", (3,)),            # M == N/2 in the pair domain
])
def test_ambiguous_vector_needs_a_declaration(m, n, source, shape):
    with pytest.raises(coda.LaunchError) as info:
        _kinds(source, m, n, v=torch.ones(shape))
    text = str(info.value)
    assert "'v'" in text and "fits kinds row and col" in text and "declare its kind" in text
    assert "`v: row` in an EPILOGUE header, or `v: coda.row` as a Python annotation" in text


def test_a_one_element_tensor_for_a_scalar_says_what_to_pass():
    """A [1] tensor (an nn.Parameter(torch.zeros(1)), ReZero's alpha) for a scalar operand: the
    message said "expected shape a number or 0-d tensor"; it now says how to pass it."""
    with pytest.raises(coda.LaunchError) as info:
        _kinds("EPILOGUE (alpha: scalar) { output = input * alpha; }", 4, 6, alpha=torch.ones(1))
    assert str(info.value) == ("operand 'alpha' (kind scalar): expected a number or 0-d tensor, got "
                               "tensor of shape [1] (a one-element tensor: pass t.reshape(()) or t[0])")
    with pytest.raises(coda.LaunchError, match=r"or a scalar: a number or 0-d tensor\)"):
        _kinds("output = input * v;", 4, 6, v=torch.ones(1))


def test_rope_and_dropout_usage_decides_kinds():
    prog = coda.compile("output = rope(dropout(input, p), cs, sn);")
    assert {k: p.kind for k, p in prog.ir.params.items()} == {"p": "scalar", "cs": "head", "sn": "head"}
    m, n = 3, 8
    kinds = infer_kinds(prog.ir, prog.widths, m, n, {"p": 0.1, "cs": torch.ones(m, 2),
                                                     "sn": torch.ones(m, 2)})
    assert kinds == {"p": "scalar", "cs": "head", "sn": "head"}


@pytest.mark.parametrize("kind, width, shape", [
    ("tile", FULL, "[3, 8]"), ("tile", HALF, "[3, 4]"), ("row", HALF, "[3]"), ("col", FULL, "[8]"),
    ("col", HALF, "[4]"), ("head", FULL, "[3, H]"), ("scalar", FULL, "a number or 0-d tensor"),
])
def test_expected_shape_text(kind, width, shape):
    assert expected_shape(kind, 3, 8, width) == shape


# legality ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("source, fragment", [
    ("output = dropout(input, input);", "probability must be a scalar"),
    ("output = dropout(input, output);", "probability must be a scalar"),
    ("g, u = unpack(input);\noutput = dropout(g, u);", "probability must be a scalar"),
    ("output = dropout(input, col_index() * 0.05);", "probability must be a scalar"),
    ("output = dropout(input, row_index() / 100);", "probability must be a scalar"),
    ("output = dropout(input, dropout(0.5, 0.5));", "probability must be a scalar"),
    ("output = dropout(input, 1.5);", "outside [0, 1]"),
    ("output = dropout(input, -0.1);", "outside [0, 1]"),
    ("output = dropout(input, 0.5 + 0.6);", "outside [0, 1]"),
    ("EPILOGUE (p: row) { output = dropout(input, p); }", "declared `row` but a dropout probability"),
    ("EPILOGUE (p: tile) { output = dropout(input, p * 2); }", "declared `tile`"),
    ("EPILOGUE (c: col, s: head) { output = rope(input, c, s); }", "declared `col` but a rope table"),
    ("output = rope(input, c, s) + c;", "'c' is a `head` table"),
    ("output = rope(input, c, s);\nsave t = s;", "'s' is a `head` table"),
    ("output = rope(input, c, s);\nr = row_sum(c);", "'c' is a `head` table"),
    ("EPILOGUE (c: head) { output = input * c; }", "'c' is a `head` table"),
    ("output = rope(c, c, s);", "'c' is a `head` table"),
    ("output = dropout(input, p);\nsave q = rope(input, p, p);", "declared `scalar` but a rope table"),
])
def test_legality_errors(source, fragment):
    err = dsl_error(source)
    assert fragment in str(err)
    assert err.loc is not None and f"line {err.loc.line}, column {err.loc.col}" in str(err)


@pytest.mark.parametrize(("source", "line", "col"), [
    ("output = rope(input, cos, sin);\nsave bad = input * sin;", 2, 18),
    ("output = rope(input, cos, sin);\nsave t = sin;", 2, 1),
])
def test_a_head_tables_misuse_is_located_at_the_misuse(source, line, col):
    """Equal nodes are one node, located where it first appears: the error pointed at the
    legitimate rope call on line 1, not at the statement that misuses the table."""
    assert_located(dsl_error(source), line, col, "is a `head` table")


@pytest.mark.parametrize("option", coda.ir.LAUNCH_OPTIONS)
def test_operands_cannot_take_a_launch_options_name(option):
    """`prog(a, b, seed=2.0)` binds the launch's seed, never an operand `seed`: such a program
    could not be launched, so it does not compile (text and traced)."""
    err = dsl_error(f"output = input * {option};")
    assert_located(err, 1, 18, f"{option!r} is a launch option", "rename the operand")
    assert "line 1, column 10" in str(dsl_error(f"EPILOGUE({option}: tile) {{ output = input; }}"))
    traced = {}
    exec(f"def f(acc, {option}):\n    return acc * {option}", traced)
    with pytest.raises(coda.DslError, match=f"{option!r} is a launch option"):
        coda.epilogue(traced["f"])


def test_no_output_takes_the_name_of_a_col_sums():
    assert_located(dsl_error("output = input;\nsave a_col_sums = input;"), 2, 1,
                   "'a_col_sums' is the output that `a_col_sums=True` adds")
    with pytest.raises(coda.DslError, match="'a_col_sums' is the output"):
        coda.epilogue(lambda acc: {"output": acc, "a_col_sums": coda.col_sum(acc)})


@pytest.mark.parametrize("source, where, names", [
    ("EPILOGUE f(x: tile, x_s0: scalar) { output = input + x * x_s0; }", (1, 21), ("x", "x_s0")),
    ("EPILOGUE f(c: head, s: head, c_h: scalar) {\n  output = rope(input, c, s) * c_h;\n}", (1, 30),
     ("c", "c_h")),
    ("output = input;\nsave output_lo = input;", (2, 1), ("output", "output_lo")),
    ("output = input;\ns_ptr = row_sum(input);\ns = row_sum(input);", (3, 1), ("s_ptr", "s")),
])
def test_no_two_names_derive_one_kernel_parameter(source, where, names):
    """The Triton kernel's parameters are the names with suffixes (`op_x_s0`, a tile x's row
    stride): a name that another one's suffix spells would fail to compile at launch."""
    assert_located(dsl_error(source), *where, f"names {names[0]!r} and {names[1]!r} would both name")


def test_output_names_equal_under_nfkc_are_one_kernel_name():
    with pytest.raises(coda.DslError, match="'\ufb01' and 'fi' would both name"):
        coda.epilogue(lambda acc: {"output": acc, "\ufb01": acc * 2.0, "fi": acc * 3.0})


def test_kernel_name_suffixes_cover_what_the_code_generator_appends():
    """Every suffix codegen appends to an operand's or output's base name (`op_{name}`, ...) is
    in the table the check above reads, so the check cannot fall behind the generator. (The
    finishing kernel's locals, `{name}_top` and the like, are suffixes no other suffix begins
    with: two reductions' locals cannot meet.)"""
    import pathlib
    import re

    from coda.ir import KERNEL_NAME_SUFFIXES

    known = {suffix for suffixes in KERNEL_NAME_SUFFIXES.values() for suffix in suffixes}
    sources = pathlib.Path(coda.__file__).parent.joinpath("codegen").glob("*.py")
    appended = {m for path in sources for m in re.findall(
        r"(?:\{base\}|\b(?:op|out|red|fin)_\{[a-z_.]+\})(_[a-z0-9_]+)", path.read_text())}
    assert {"_ptr", "_s0", "_desc", "_bufs", "_max"} <= appended <= known


def test_check_fills_kinds_from_usage():
    from coda.dsl.lower import lower
    from coda.dsl.parser import parse

    epi = lower(parse("output = rope(input, c, s) * dropout(1, p) + t;"))
    checked = check(epi)
    assert {k: p.kind for k, p in checked.params.items()} == {"c": "head", "s": "head", "p": "scalar",
                                                              "t": None}


def test_dropout_probability_may_be_an_expression_of_scalars():
    prog = coda.compile("output = dropout(input, p * 0.5 + q);")
    assert {k: p.kind for k, p in prog.ir.params.items()} == {"p": "scalar", "q": "scalar"}
