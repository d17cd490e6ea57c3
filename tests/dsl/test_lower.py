"""AST -> IR: name resolution, outputs, and every compile-time error of the DSL, located."""

from __future__ import annotations

import pytest

import coda
from coda.dsl.lower import lower
from coda.dsl.parser import parse
from coda.ir import format_epilogue
from oracle import assert_located, dsl_error


def _raw(source: str):
    """The IR straight from lowering, before any pass."""
    return lower(parse(source), source)


def _ir(source: str) -> str:
    return format_epilogue(coda.compile(source).ir)


# resolution -----------------------------------------------------------------------------------------


def test_input_and_acc_are_the_gemm_result():
    assert _ir("output = acc;") == _ir("output = input;")
    assert [n.op for n in _raw("output = acc + input;").nodes()] == ["input", "add"]


def test_free_names_become_operands_in_first_read_order():
    epi = _raw("h = input + bias;\noutput = h * scale + residual;")
    assert list(epi.params) == ["bias", "scale", "residual"]
    assert all(p.kind is None and not p.declared for p in epi.params.values())
    assert epi.params["bias"].loc.line == 1 and epi.params["bias"].loc.col == 13


def test_declared_params_keep_header_order_and_kinds():
    epi = _raw("EPILOGUE k(r: row, t, c: col) { output = input * c + t * r; }")
    assert [(p.name, p.kind, p.declared) for p in epi.params.values()] == [
        ("r", "row", True), ("t", None, True), ("c", "col", True)]


def test_locals_can_be_reassigned_and_shadow_nothing():
    epi = _raw("h = input;\nh = h * 2;\noutput = h + 1;")
    assert [n.op for n in epi.nodes()] == ["input", "const", "mul", "const", "add"]
    assert epi.params == {}


def test_output_read_before_assignment_is_the_prior_output():
    assert _ir("output += input;") == _ir("output = output + input;")
    assert "prior" in _ir("x = output * 2;\noutput = x + input;")
    epi = _raw("output = input;\noutput = output * 2;")     # after assignment: the new value
    assert not epi.accumulates


def test_outputs_in_statement_order():
    prog = coda.compile("save a = input;\nr = row_sum(input);\noutput = input * 2;\n"
                        "save b = output;\nc = col_max(b);")
    assert prog.output_names == ["output", "a", "r", "b", "c"]
    assert [o.reduction for o in prog.ir.outputs] == [None, None, "row_sum", None, "col_max"]


def test_saved_name_is_readable_after_save():
    assert _ir("save h = input + 1;\noutput = h * h;").count("add") == 1


def test_unpack_gives_the_two_halves():
    epi = _raw("gate, up = unpack(input);\noutput = gate * up;")
    unpacks = [n for n in epi.nodes() if n.op == "unpack"]
    assert [n.arg for n in unpacks] == [0, 1]
    assert unpacks[0].args == unpacks[1].args


def test_empty_parameter_list_means_no_operands():
    assert coda.compile("EPILOGUE () { output = input * 2; }").ir.params == {}


def test_a_declared_parameter_may_take_a_constant_s_name():
    assert list(_raw("EPILOGUE f(inf: scalar) { output = min(input, inf); }").params) == ["inf"]


def test_compile_needs_text():
    with pytest.raises(coda.CodaError, match="program text"):
        coda.compile(b"output = input;")


# errors, each with its line and column -------------------------------------------------------------


@pytest.mark.parametrize("source, line, col, fragments", [
    # unknown function, with a suggestion when one is close
    ("output = gleu(input);", 1, 10, ("unknown function 'gleu'", "did you mean 'gelu'?")),
    ("output = row_summ(input);", 1, 10, ("unknown function 'row_summ'", "did you mean 'row_sum'?")),
    ("output = frobnicate(input);", 1, 10, ("unknown function 'frobnicate'",)),
    # ... and, for other languages' functions, how to write them (not a misleading spelling match)
    ("output = input;\ns = sum(input);", 2, 5, ("unknown function 'sum'; write row_sum(x)", "col_sum(x)")),
    ("output = softmax(input);", 1, 10, ("unknown function 'softmax'; write row_logsumexp(x)",)),
    ("output = pow(input, 2.0);", 1, 10, ("unknown function 'pow'; write x * x or square(x)",)),
    ("output = clip(input, 0.0, 1.0);", 1, 10, ("unknown function 'clip'; write clamp(x, lo, hi)",)),
    # wrong arity
    ("output = gelu(input, 1);", 1, 10, ("gelu takes 1 argument, got 2",)),
    ("output = where(input, 1);", 1, 10, ("where takes 3 arguments, got 2",)),
    ("output = max(input);", 1, 10, ("max takes 2 arguments, got 1",)),
    ("output = exp();", 1, 10, ("exp takes 1 argument, got 0",)),
    ("s = row_sum(input, input);\noutput = input;", 1, 5, ("row_sum takes 1 argument, got 2",)),
    ("g, u = unpack(input, input);\noutput = g;", 1, 8, ("unpack takes 1 argument, got 2",)),
    ("output = dropout(input);", 1, 10, ("dropout takes 2 arguments, got 1",)),
    ("output = rope(input, c);", 1, 10, ("rope takes 3 arguments, got 2",)),
    # undefined names read before assignment
    ("output = h;\nh = input;", 1, 10, ("'h' is read before it is assigned",)),
    ("h = h + 1;\noutput = h;", 1, 5, ("'h' is read before it is assigned",)),
    ("x += 1;\noutput = x;", 1, 1, ("'x' is read before it is assigned",)),
    # locals neither read nor kept as outputs (once silently dropped: a forgotten `save`)
    ("output = input;\nextra = input * 2;", 2, 1, ("'extra' is assigned but never read",
                                                    "`save extra = ...;`")),
    ("h = gelu(input);\nh = input;\noutput = h;", 1, 1, ("'h' is assigned but never read before it "
                                                         "is assigned again",)),
    # ... after `save h`, where `save h = ...;` again would write the output twice: a new name
    ("save h = gelu(input);\nh = h * 2;\noutput = input;", 2, 1, (
        "'h' is assigned but never read; the output 'h' keeps the value saved earlier, so `save` "
        "this one under a new name",)),
    # `output` never assigned
    ("h = input;", 1, 11, ("never assigns `output`",)),
    ("outptu = input;", 1, 16, ("never assigns `output` (it assigns 'outptu': did you mean `output`?)",)),
    ("EPILOGUE {\n  save s = input;\n}", 3, 1, ("never assigns `output`",)),
    ("s = row_sum(input); m = col_max(input);", 1, 40,
     ("never assigns `output` (to compute only reductions, write `output = input;` and launch with "
      "outputs=['s', 'm']",)),
    # reduction results read back
    ("s = row_sum(input);\noutput = input / s;", 2, 18, ("'s' is a reduction result (row_sum)",
                                                          "cannot read it")),
    ("s = col_max(input);\ns = input;\noutput = input;", 2, 1, ("'s' is the reduction output",
                                                                "cannot be reassigned")),
    ("s = row_logsumexp(input);\nsave s2 = s;\noutput = input;", 2, 11, ("reduction result",)),
    # reductions nested in expressions, or not plain assignments
    ("output = input - row_max(input);", 1, 18, ("row_max(...) is an output", "whole right-hand side")),
    ("s = 2 * col_sum(input);\noutput = input;", 1, 9, ("col_sum(...) is an output",)),
    ("save s = row_sum(input);\noutput = input;", 1, 1, ("a reduction is an output",)),
    ("output = input;\nr = input;\nr += row_sum(input);", 3, 1, ("a reduction is an output",)),
    ("output = row_sum(input);", 1, 1, ("`output` is a tile",)),
    ("output = input;\na, b = row_sum(input);", 2, 4, ("only `unpack(...)` gives two values",)),
    # unpack misuse
    ("x = unpack(input);\noutput = x;", 1, 5, ("unpack gives two values", "gate, up = unpack")),
    ("output = unpack(input) * 2;", 1, 10, ("unpack(...) must be the whole right-hand side",)),
    ("a, b = gelu(input);\noutput = a;", 1, 4, ("only `unpack(...)` gives two values",)),
    ("a, b = input;\noutput = a;", 1, 4, ("only `unpack(...)` gives two values",)),
    ("g, g = unpack(input);\noutput = g;", 1, 4, ("both halves of the pair are named 'g'",)),
    ("output, output = unpack(input);", 1, 9, ("both halves of the pair are named 'output'",)),
    ("g, u = unpack(input);\nx, y = unpack(g);\noutput = x;", 2, 8, ("already unpacked",)),
    ("g, u = unpack(input);\noutput = g + input;", 2, 12, ("mixes an [M, N] value with an [M, N/2]",)),
    # assignment to an operand (declared in the header)
    ("EPILOGUE (bias: col) {\n  bias = input;\n  output = bias;\n}", 2, 3,
     ("cannot assign to operand 'bias'",)),
    ("EPILOGUE (bias: col) {\n  output = input + bias;\n  bias = input;\n}", 3, 3,
     ("cannot assign to operand 'bias'",)),
    ("EPILOGUE (s: row) {\n  output = input;\n  s = row_sum(input);\n}", 3, 3,
     ("cannot assign to operand 's'",)),
    ("EPILOGUE (s) {\n  save s = input;\n  output = input;\n}", 2, 8, ("cannot assign to operand 's'",)),
    ("EPILOGUE (g: tile) {\n  g, u = unpack(input);\n  output = g;\n}", 2, 3,
     ("cannot assign to operand 'g'",)),
    # undeclared name when the header has a parameter list
    ("EPILOGUE (bias: col) {\n  output = input + bias * scale;\n}", 2, 27,
     ("unknown name 'scale'", "declared parameter")),
    ("EPILOGUE () { output = input + b; }", 1, 32, ("unknown name 'b'",)),
    # other languages' constants, which would be free operands asked for at launch (`inf=...`)
    ("output = where(input > 0, input, -inf);", 1, 35, ("there is no constant 'inf': write 1e400",)),
    ("EPILOGUE () { output = where(True, input, 0); }", 1, 30, ("there is no constant 'True'",
                                                                "write 1.0")),
    ("output = where(input != input, nan, input);", 1, 32, ("no constant 'nan': a NaN is 0.0 / 0.0",)),
    ("output = min(input, INF);", 1, 21, ("there is no constant 'INF': write 1e400",)),   # as NAN is
    ("output = min(input, Inf);", 1, 21, ("there is no constant 'Inf': write 1e400",)),
    # names that are not available
    ("output = gelu;", 1, 10, ("'gelu' is a function; call it as gelu(...)",)),
    ("input = acc;\noutput = input;", 1, 1, ("'input' is the GEMM result",)),
    ("save acc = input;\noutput = input;", 1, 6, ("'acc' is the GEMM result",)),
    ("exp = input;\noutput = exp;", 1, 1, ("'exp' is reserved",)),
    ("output = input;\nexp = row_sum(input);", 2, 1, ("'exp' is reserved",)),
    ("output = input;\ninput = row_sum(input);", 2, 1, ("'input' is the GEMM result",)),
    ("output = input + EPILOGUE;", 1, 18, ("'EPILOGUE' is reserved",)),
    ("EPILOGUE (input: tile) { output = input; }", 1, 11, ("'input' is the GEMM result",)),
    ("EPILOGUE (gelu) { output = input; }", 1, 11, ("'gelu' is reserved",)),
    ("EPILOGUE (a, a) { output = input + a; }", 1, 14, ("parameter 'a' is declared twice",)),
    # outputs written twice
    ("save s = input;\nsave s = input;\noutput = input;", 2, 6, ("output 's' is written twice",)),
    ("save output = input;", 1, 6, ("`output` is the primary output: assign it as `output = ...;`",)),
    ("h = input;\nsave h = input;\noutput = h;", 2, 6, ("'h' already names a value",)),
    # rope tables must be operands
    ("output = rope(input, 1, s);", 1, 22, ("rope's cos and sin must be operands",)),
    ("output = rope(input, c * 2, s);", 1, 24, ("rope's cos and sin must be operands",)),
])
def test_compile_errors_are_located(source, line, col, fragments):
    err = dsl_error(source)
    assert isinstance(err, coda.CodaError)
    assert (err.loc.line, err.loc.col) == (line, col), str(err)
    assert_located(err, line, col, *fragments)


def test_error_names_only_the_first_problem_and_keeps_the_source():
    src = "EPILOGUE {\n  output = gleu(input) + nope(input);\n}"
    err = dsl_error(src)
    assert err.source == src
    assert "gleu" in err.message and "nope" not in err.message


def test_empty_program_never_assigns_output():
    err = dsl_error("")
    assert "never assigns `output`" in str(err) and "line 1, column 1" in str(err)
