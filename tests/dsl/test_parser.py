"""The lexer and the recursive-descent parser: tokens, locations, precedence, syntax errors."""

from __future__ import annotations

import pytest
import torch

import coda
from coda.dsl import parser as ast
from coda.dsl.lexer import tokenize
from coda.dsl.parser import parse
from coda.errors import Loc
from oracle import assert_located, dsl_error

# lexer ------------------------------------------------------------------------------------------


def test_tokens_kinds_texts_and_locations():
    toks = tokenize("h = input+1.5e-3;\n  output += h; # note\n// whole line\nx <= y")
    got = [(t.kind, t.text, t.loc.line, t.loc.col) for t in toks]
    assert got == [
        ("name", "h", 1, 1), ("op", "=", 1, 3), ("name", "input", 1, 5), ("op", "+", 1, 10),
        ("num", "1.5e-3", 1, 11), ("op", ";", 1, 17),
        ("name", "output", 2, 3), ("op", "+=", 2, 10), ("name", "h", 2, 13), ("op", ";", 2, 14),
        ("name", "x", 4, 1), ("op", "<=", 4, 3), ("name", "y", 4, 6),
        ("end", "", 4, 7),
    ]


@pytest.mark.parametrize("text", ["1", "1.", ".5", "2.25", "1e3", "1E+3", "3.5e-2", "007"])
def test_number_forms(text):
    (tok, end) = tokenize(text)
    assert tok.kind == "num" and tok.text == text and end.kind == "end"


@pytest.mark.parametrize("op", ["+=", "<=", ">=", "==", "!=", "<", ">", "=", "+", "-", "*", "/",
                                "(", ")", "{", "}", ",", ";", ":"])
def test_operators(op):
    assert [t.text for t in tokenize(op)] == [op, ""]


@pytest.mark.parametrize("source, line, col, char", [
    ("output = input @ b;", 1, 16, "@"),
    ("output = input;\n  x = $;", 2, 7, "$"),
    ("output = input ^ 2;", 1, 16, "^"),
    ("output = ínput;", 1, 10, "í"),
    ("output = input;\n\n\toutput = 1 ! 2;", 3, 13, "!"),
    ("output = input * ３;", 1, 18, "３"),     # other scripts' digits are no numbers (were 3.0)
    ("output = input * 1٠;", 1, 19, "٠"),
])
def test_unexpected_character(source, line, col, char):
    err = dsl_error(source)
    assert err.loc == Loc(line, col)
    assert_located(err, line, col, f"unexpected character {char!r}")


@pytest.mark.parametrize("source, line, col, fragment", [
    # other languages' operators and statements: what to write instead
    ("output = input ^ 2;", 1, 16, "'^': there is no power operator: write x * x or square(x)"),
    ("output = input ** 2;", 1, 16, "there is no power operator `**`: write x * x or square(x)"),
    ("output = input > 0 ? input : 0;", 1, 20, "'?': there is no conditional expression: write where(c"),
    ("output = where(input > 0 && input < 1, input, 0);", 1, 26, "'&': there are no logical operators"),
    ("output = input + bias[0];", 1, 22, "'[': there is no indexing"),
    ("if (input > 0) { output = input; }", 1, 4, "the DSL has no `if`; every statement assigns a value"),
    ("return gelu(input);", 1, 8, "the DSL has no `return`; assign the result to `output`"),
    ("let h = input;\noutput = h;", 1, 5, "assignments need no `let`; write `h = ...;`"),
    ("output = input;\n  float h = input;", 2, 9, "assignments need no `float`; write `h = ...;`"),
    # what a model trained on Python, PyTorch, CUDA and NumPy writes: said, not a bare syntax error
    ("output = torch.exp(input);", 1, 15, "'.': there are no modules or methods: call a function by"),
    ("output = input.exp();", 1, 15, "exp(x) (not torch.exp(x), np.exp(x) or x.exp())"),
    ("output = input * rsqrt(r + 1e-5f);", 1, 32, "'f' after the number 1e-5: numbers are plain"),
    ("output = input * 0x10;", 1, 19, "'x' after the number 0: numbers are plain decimals"),
    ("output = max(input, float('-inf'));", 1, 27, "there are no strings; for infinity, float('inf'), "
                                                   "write 1e400"),
    ("output = input if input > 0 else 0;", 1, 16, "found 'if': there is no conditional expression"),
    ("output = where(input > 0 and input < 1, input, 0);", 1, 26, "found 'and': there are no logical"),
    ("output = where(not (input > 0), input, 0);", 1, 16, "unexpected 'not': there is no `not`"),
    ("h: float = input;\noutput = h;", 1, 2, "values have no declared types; write `h = ...;`"),
    ("output = input;\noutput -= 1;", 2, 8, "the only compound assignment is `+=`; write `output = "
                                          "output - ...;`"),
    ("output = dropout(input, p=0.1);", 1, 26, "arguments go by position, not by name: write the "
                                               "value alone, without `p=`"),
    ("output = input; /* the result */", 1, 17, "there are no block comments"),
    ("epilogue f() { output = input; }", 1, 10, "a header starts with `EPILOGUE`, in capitals"),
    # characters that only look like ASCII, as typeset or generated text has them
    ("output = input \u2212 1;", 1, 16, "'\u2212' (MINUS SIGN): write the ASCII '-' it looks like"),
    ("output = input \u00d7 2;", 1, 16, "(MULTIPLICATION SIGN): write the ASCII '*' it looks like"),
    ("output = input\u00a0* 2;", 1, 15, "(NO-BREAK SPACE): write a plain space, or nothing"),
    ("output = \u201cx\u201d;", 1, 10, "there are no strings"),
])
def test_hints_for_other_languages_syntax(source, line, col, fragment):
    assert_located(dsl_error(source), line, col, fragment)


# parser: structure --------------------------------------------------------------------------------


def _stmt(source: str, index: int = 0) -> ast.Assign:
    return parse(source).body[index]


def _shape(e):
    """An AST expression as nested tuples, without locations."""
    if isinstance(e, ast.Num):
        return e.value
    if isinstance(e, ast.Name):
        return e.name
    return (e.func, *(_shape(a) for a in e.args))


@pytest.mark.parametrize("expr, shape", [
    ("a + b * c", ("add", "a", ("mul", "b", "c"))),
    ("a * b + c", ("add", ("mul", "a", "b"), "c")),
    ("a - b - c", ("sub", ("sub", "a", "b"), "c")),
    ("a / b / c", ("div", ("div", "a", "b"), "c")),
    ("a - -b", ("sub", "a", ("neg", "b"))),
    ("-a * b", ("mul", ("neg", "a"), "b")),
    ("+a", "a"),
    ("(a + b) * c", ("mul", ("add", "a", "b"), "c")),
    ("a + b < c * 2", ("lt", ("add", "a", "b"), ("mul", "c", 2.0))),
    ("a <= b", ("le", "a", "b")),
    ("a > b", ("gt", "a", "b")),
    ("a >= b", ("ge", "a", "b")),
    ("a == b", ("eq", "a", "b")),
    ("a != b", ("ne", "a", "b")),
    ("where(a < 0, b, 1)", ("where", ("lt", "a", 0.0), "b", 1.0)),
    ("f()", ("f",)),
    ("max(a, min(b, 2.5e1))", ("max", "a", ("min", "b", 25.0))),
])
def test_precedence_and_calls(expr, shape):
    assert _shape(_stmt(f"output = {expr};").value) == shape


def test_statement_forms():
    prog = parse("EPILOGUE k(bias: col, p, r: row) {\n"
                 "  gate, up = unpack(input);\n"
                 "  save s = gate;\n"
                 "  output += up;\n"
                 "  t = row_sum(up);\n"
                 "}")
    assert prog.name == "k"
    assert [(p.name, p.kind) for p in prog.params] == [("bias", "col"), ("p", None), ("r", "row")]
    assert [(tuple(t.name for t in s.targets), s.op) for s in prog.body] == [
        (("gate", "up"), "="), (("s",), "save"), (("output",), "+="), (("t",), "=")]
    assert [s.loc for s in prog.body] == [Loc(2, 3), Loc(3, 3), Loc(4, 3), Loc(5, 3)]
    assert prog.body[0].targets[1].loc == Loc(2, 9)
    assert prog.body[0].value.loc == Loc(2, 14)


@pytest.mark.parametrize("source, name, params", [
    ("EPILOGUE { output = input; }", None, None),
    ("EPILOGUE name { output = input; }", "name", None),
    ("EPILOGUE () { output = input; }", None, ()),
    ("EPILOGUE n() { output = input; }", "n", ()),
    ("output = input;", None, None),
    ("{ output = input; }", None, None),
    ("", None, None),
])
def test_headers(source, name, params):
    prog = parse(source)
    assert prog.name == name and prog.params == params


def test_every_node_has_a_location():
    source = "EPILOGUE (b: col) {\n  h = gelu(input + b) * 2;\n  output = -h;\n}"
    prog = parse(source)

    def walk(e):
        assert isinstance(e.loc, Loc)
        for a in getattr(e, "args", ()):
            walk(a)

    for stmt in prog.body:
        walk(stmt.value)
    mul = prog.body[0].value
    assert mul.loc == Loc(2, 23)                 # the operator's column
    assert mul.args[0].loc == Loc(2, 7)          # gelu(
    assert mul.args[0].args[0].args[1].loc == Loc(2, 20)   # b
    assert prog.params[0].loc == Loc(1, 11)


def test_comments_are_ignored():
    src = ("# leading comment\nEPILOGUE { // trailing\n"
           "  output = input; # output = nope(;\n}\n// end")
    assert coda.compile(src).output_names == ["output"]


# parser: errors -------------------------------------------------------------------------------------


@pytest.mark.parametrize("source, line, col, fragment", [
    ("output = input", 1, 15, "expected ';' to end the statement, found the end of the program"),
    ("output = input\nsave s = input;", 2, 1, "expected ';'"),
    ("output = (input + 1;", 1, 20, "expected ')' to close the parenthesis"),
    ("output = gelu(input;", 1, 20, "expected ',' or ')' in the argument list"),
    ("output = gelu(input,);", 1, 21, "expected an expression, found ')'"),
    ("output = ;", 1, 10, "expected an expression, found ';'"),
    ("output = input +;", 1, 17, "expected an expression"),
    ("output input;", 1, 8, "expected '=' or '+=' after 'output', found 'input'"),
    ("a, b += unpack(input);", 1, 6, "expected '=' after 'b'"),
    ("a, = unpack(input);", 1, 4, "expected a second name to unpack into"),
    ("1 = input;", 1, 1, "expected a statement"),
    ("save = input;", 1, 1, "'save' is reserved"),
    ("save 3 = input;", 1, 6, "expected '=' or '+=' after 'save', found '3'"),
    ("save s input;", 1, 8, "expected '=' after the saved name"),
    ("output = a < b < c;", 1, 16, "comparisons cannot be chained"),
    ("EPILOGUE output = input;", 1, 17, "expected '{' to open the program body"),
    ("EPILOGUE { output = input;", 1, 27, "expected '}' to close the program body, found the end"),
    ("EPILOGUE { output = input; } extra", 1, 30, "unexpected 'extra' after the program"),
    ("EPILOGUE (a b) { output = input; }", 1, 13, "expected ',' or ')' in the parameter list"),
    ("EPILOGUE (a,) { output = input; }", 1, 13, "expected a parameter name"),
    ("EPILOGUE (a: ) { output = input; }", 1, 14, "expected an operand kind"),
    ("EPILOGUE (a: matrix) { output = input; }", 1, 14, "unknown operand kind 'matrix'"),
    ("{ output = input; } }", 1, 21, "unexpected '}' after the program"),
    ("output = input; }", 1, 17, "expected a statement"),
])
def test_syntax_errors_are_located(source, line, col, fragment):
    err = dsl_error(source)
    assert isinstance(err, coda.CodaError)
    assert err.loc == Loc(line, col)
    assert_located(err, line, col, fragment)


@pytest.mark.parametrize("opening, closing", [("(", ")"), ("exp(", ")"), ("-", ""), ("+", "")])
def test_nesting_deeper_than_the_limit_is_located(opening, closing):
    from coda.dsl.parser import MAX_NESTING

    nested = lambda depth: f"x = input;\noutput = {opening * depth}x{closing * depth};"  # noqa: E731
    assert coda.compile(nested(MAX_NESTING)).ir.outputs
    column = 10 + len(opening) * (MAX_NESTING + 1)   # the term past the limit
    assert_located(dsl_error(nested(MAX_NESTING + 1)), 2, column, f"more than {MAX_NESTING} levels")


@pytest.mark.parametrize("operator", ["+", "*", "-"])
def test_a_long_chain_of_operators_compiles(operator):
    """`input + input + ...` without parentheses is a tree as deep as it is long; it was lowered
    by recursion, so from about 400 terms it failed with the too-deep error and no location."""
    terms = 2000
    prog = coda.compile(f"output = input{f' {operator} input' * terms};")
    x = torch.tensor([[1.0, -1.0, 0.5]], dtype=torch.float64)
    want = {"+": x * (terms + 1), "*": x ** (terms + 1), "-": x * (1 - terms)}[operator]
    torch.testing.assert_close(prog.map(x, backend="reference")["output"], want)


def test_unknown_kind_lists_the_kinds():
    err = dsl_error("EPILOGUE (bias: column) { output = input + bias; }")
    for kind in ("tile", "row", "col", "scalar", "head"):
        assert kind in err.message


def test_error_at_end_of_multiline_program():
    err = dsl_error("EPILOGUE {\n  output = input;\n")
    assert err.loc == Loc(3, 1)
    assert "line 3, column 1" in str(err)


@pytest.mark.parametrize("end", ["\n", "\r\n", "\r"])
def test_lines_end_at_lf_crlf_or_cr(end):
    """Old Mac (CR) and Windows (CRLF) text is located and quoted line by line, as Unix text."""
    err = dsl_error(end.join(["h = input;", "h2 = h;  # a comment", "output = gelux(h2);", ""]))
    assert err.loc == Loc(3, 10)
    assert str(err).splitlines()[1:] == ["    output = gelux(h2);", "             ^"]


def test_a_byte_order_mark_is_no_character():
    """A file saved as "UTF-8 with BOM" compiles, with columns as an editor shows them."""
    assert coda.compile("\ufeffoutput = input;").output_names == ["output"]
    assert dsl_error("\ufeffoutput = gelux(input);").loc == Loc(1, 10)


def test_parse_error_is_raised_by_parse_too():
    with pytest.raises(coda.DslError) as info:
        parse("output = = 1;")
    assert info.value.loc == Loc(1, 10) and info.value.source == "output = = 1;"
