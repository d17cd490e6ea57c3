"""`@coda.epilogue`: a Python function traced into the same IR as the text DSL.

(No `from __future__ import annotations` here: the annotations below are the kinds themselves;
the stringified form is tested on its own.)"""

import linecache
import math

import pytest
import torch

import coda
from coda.errors import Loc
from coda.ir import format_epilogue
from oracle import launch_inputs

# Equivalent programs: DSL text and a traced function must give the very same IR ---------------------


def bias_gelu_dropout(acc, bias: coda.col, residual: coda.tile, p: coda.scalar):
    h = acc + bias
    out = coda.dropout(coda.gelu(h), p) + residual
    return {"output": out, "preact": h, "ss": coda.row_sum(out * out)}


BIAS_GELU_DROPOUT = """
EPILOGUE bias_gelu_dropout(bias: col, residual: tile, p: scalar) {
  h = input + bias;            # the pre-activation
  save preact = h;
  output = dropout(gelu(h), p) + residual;
  ss = row_sum(output * output);
}"""


def swiglu(acc, rstd: "row"):  # noqa: F821 - a kind given as a string annotation
    gate, up = coda.unpack(acc * rstd)
    return coda.silu(gate) * up


SWIGLU = """
EPILOGUE swiglu(rstd: row) {
  gate, up = unpack(input * rstd);
  output = silu(gate) * up;
}"""


def reductions(acc, scale):
    y = acc * scale
    return {"output": y, "rs": coda.row_sum(y), "cs": coda.col_sum(y * y), "rm": coda.row_max(y),
            "cm": coda.col_max(-y), "lse": coda.row_logsumexp(y)}


REDUCTIONS = """
EPILOGUE reductions {
  output = input * scale;
  rs = row_sum(output);
  cs = col_sum(output * output);
  rm = row_max(output);
  cm = col_max(-output);
  lse = row_logsumexp(output);
}"""


def rope_qk(acc, cos: coda.head, sin: coda.head, bias: coda.col):
    return {"output": coda.rope(acc + bias, cos, sin), "pre": acc + bias}


ROPE = """
EPILOGUE rope_qk(cos: head, sin: head, bias: col) {
  save pre = input + bias;
  output = rope(pre, cos, sin);
}"""


def accumulate(acc, output, alpha: coda.scalar):
    return output + acc * alpha


ACCUMULATE = """
EPILOGUE accumulate(alpha: scalar) {
  output += input * alpha;
}"""


def accumulate_pairs(acc, output):
    gate, up = coda.unpack(acc)
    return output + coda.gelu(gate) * up


ACCUMULATE_PAIRS = """
EPILOGUE accumulate_pairs {
  g, u = unpack(input);
  output += gelu(g) * u;
}"""


def packed_pairs(acc, t: coda.tile):
    gate, up = coda.unpack(acc)
    return {"output": coda.pack(up, gate * 2), "wide": coda.pack(acc * t, acc)}


PACKED_PAIRS = """
EPILOGUE packed_pairs(t: tile) {
  g, u = unpack(input);
  output = pack(u, g * 2);
  save wide = pack(input * t, input);
}"""


def leaky_and_friends(acc, r: coda.row, c: coda.col):
    y = coda.where(acc > 0, acc, 0.01 * acc)
    z = coda.max(coda.min(y, c), -c) / (1 + coda.abs(r))
    w = (acc >= r) + (acc <= c) + (acc < 1) + (acc == 0) + (acc != r)
    return {"output": 2 - z * 3 + w, "t": coda.tanh_grad(y) - coda.sqrt(coda.square(y) + 1)}


LEAKY = """
EPILOGUE leaky_and_friends(r: row, c: col) {
  y = where(input > 0, input, 0.01 * input);
  z = max(min(y, c), -c) / (1 + abs(r));
  w = (input >= r) + (input <= c) + (input < 1) + (input == 0) + (input != r);
  output = 2 - z * 3 + w;
  save t = tanh_grad(y) - sqrt(square(y) + 1);
}"""


def dgelu(acc, preact: coda.tile, p=0.25):
    g = coda.dropout(acc, p) * coda.gelu_grad(preact)
    return {"output": g, "db": coda.col_sum(g)}


DGELU = """
EPILOGUE dgelu(preact: tile, p: scalar) {
  output = dropout(input, p) * gelu_grad(preact);
  db = col_sum(output);
}"""


def identity(acc):
    return acc


IDENTITY = "EPILOGUE identity { output = acc * 1 - 0; }"


EQUIVALENT = [
    (BIAS_GELU_DROPOUT, bias_gelu_dropout),
    (SWIGLU, swiglu),
    (REDUCTIONS, reductions),
    (ROPE, rope_qk),
    (ACCUMULATE, accumulate),
    (ACCUMULATE_PAIRS, accumulate_pairs),
    (PACKED_PAIRS, packed_pairs),
    (LEAKY, leaky_and_friends),
    (DGELU, dgelu),
    (IDENTITY, identity),
]


@pytest.mark.parametrize("text, fn", EQUIVALENT, ids=[fn.__name__ for _, fn in EQUIVALENT])
def test_parser_and_tracer_give_identical_ir(text, fn):
    parsed, traced = coda.compile(text), coda.epilogue(fn)
    assert format_epilogue(parsed.ir) == format_epilogue(traced.ir)
    assert parsed.output_names == traced.output_names
    assert parsed.widths.outputs == traced.widths.outputs


def _operands(name: str, m: int, n: int, g: torch.Generator):
    values = {
        "bias_gelu_dropout": lambda: {"bias": torch.randn(n, generator=g, dtype=torch.float64),
                                      "residual": torch.randn(m, n, generator=g, dtype=torch.float64),
                                      "p": 0.3},
        "swiglu": lambda: {"rstd": torch.rand(m, generator=g, dtype=torch.float64) + 0.5},
        "reductions": lambda: {"scale": 0.5},
        "rope_qk": lambda: {"cos": torch.randn(m, 3, generator=g, dtype=torch.float64),
                            "sin": torch.randn(m, 3, generator=g, dtype=torch.float64),
                            "bias": torch.randn(n, generator=g, dtype=torch.float64)},
        "accumulate": lambda: {"alpha": -1.5},
        "accumulate_pairs": dict,
        "packed_pairs": lambda: {"t": torch.randn(m, n, generator=g, dtype=torch.float64)},
        "leaky_and_friends": lambda: {"r": torch.randn(m, generator=g, dtype=torch.float64),
                                      "c": torch.randn(n, generator=g, dtype=torch.float64)},
        "dgelu": lambda: {"preact": torch.randn(m, n, generator=g, dtype=torch.float64), "p": 0.25},
        "identity": dict,
    }
    return values[name]()


@pytest.mark.parametrize("text, fn", EQUIVALENT, ids=[fn.__name__ for _, fn in EQUIVALENT])
def test_parser_and_tracer_compute_identical_values(text, fn):
    m, n, k = 7, 10, 5
    a, b = launch_inputs(m, n, k, seed=11)
    operands = _operands(fn.__name__, m, n, torch.Generator().manual_seed(3))
    parsed, traced = coda.compile(text), coda.epilogue(fn)
    prior = None
    if parsed.ir.accumulates:
        prior = torch.randn(m, n // 2 if parsed.has_unpack else n, dtype=torch.float64)

    def run(prog):
        out = None if prior is None else prior.clone()
        return prog.reference(a, b, seed=1234, out=out, **operands)

    got_p, got_t = run(parsed), run(traced)
    assert got_p.keys() == got_t.keys()
    for key in got_p:
        assert torch.equal(got_p[key], got_t[key]), key


# tracer specifics ----------------------------------------------------------------------------------


def test_annotations_defaults_and_first_parameter():
    def k(x, bias: coda.col, r: "row", t, p=0.5, q: coda.scalar = 2):  # noqa: F821
        return x + bias + r + t + p + q

    epi = coda.epilogue(k).ir
    assert [(p.name, p.kind, p.default) for p in epi.params.values()] == [
        ("bias", "col", None), ("r", "row", None), ("t", None, None), ("p", "scalar", 0.5),
        ("q", "scalar", 2.0)]
    assert epi.name == "k"


def test_string_annotation_of_a_kind_constant():
    # What `from __future__ import annotations` turns `bias: coda.col` into.
    def k(acc, bias: "coda.col"):
        return acc + bias

    assert coda.epilogue(k).ir.params["bias"].kind == "col"


def test_annotations_under_postponed_evaluation():
    source = ("from __future__ import annotations\nimport coda\n"
              "def k(acc, bias: coda.col, r: 'row', t: coda.tile, s: \"scalar\"):\n"
              "    return acc + bias + r + t + s\n")
    namespace = {}
    exec(compile(source, "<postponed>", "exec"), namespace)
    params = coda.epilogue(namespace["k"]).ir.params
    assert {k: p.kind for k, p in params.items()} == {"bias": "col", "r": "row", "t": "tile", "s": "scalar"}


def test_postponed_annotations_with_coda_imported_inside_a_function():
    """`coda` imported in the function that defines the epilogue is no global of the module: the
    postponed annotation "coda.col" is found among the variables the epilogue closes over (it
    was refused as an unknown kind); where the epilogue does not use `coda`, the error says how
    to write the kind."""
    source = ("from __future__ import annotations\n"
              "def build(use_coda):\n"
              "    import coda\n"
              "    def k(acc, bias: coda.col):\n"
              "        return coda.gelu(acc + bias) if use_coda else acc + bias\n"
              "    def plain(acc, bias: coda.col):\n"
              "        return acc + bias\n"
              "    return k if use_coda else plain\n")
    namespace = {}
    exec(compile(source, "<postponed>", "exec"), namespace)
    assert coda.epilogue(namespace["build"](True)).ir.params["bias"].kind == "col"
    with pytest.raises(coda.DslError, match="write the kind as a string: 'col'"):
        coda.epilogue(namespace["build"](False))


def test_scalar_default_is_used_when_not_passed():
    def scaled(acc, alpha=2.5):
        return acc * alpha

    prog = coda.epilogue(scaled)
    a, b = launch_inputs(3, 4, 2, seed=1)
    assert torch.equal(prog.reference(a, b)["output"], (a @ b) * 2.5)
    assert torch.equal(prog.reference(a, b, alpha=-1.0)["output"], -(a @ b))


def test_a_number_as_output_and_reflected_operators():
    def k(acc, r: coda.row):
        return {"output": 1 - acc / 2, "c": 3.0, "d": 2 / (1 + r * r), "e": +acc}

    prog = coda.epilogue(k)
    a, b = launch_inputs(4, 5, 3, seed=2)
    r = torch.randn(4, dtype=torch.float64)
    outs = prog.reference(a, b, r=r)
    acc = a @ b
    assert torch.allclose(outs["output"], 1 - acc / 2, rtol=1e-15, atol=1e-15)
    assert torch.equal(outs["c"], torch.full((4, 5), 3.0, dtype=torch.float64))
    assert torch.allclose(outs["d"], (2 / (1 + r * r))[:, None].expand(4, 5), rtol=1e-15)
    assert torch.equal(outs["e"], acc)


@pytest.mark.parametrize("fn, fragment", [
    (lambda: 1, "takes the GEMM result as its first parameter"),
    (lambda acc, *rest: acc, "*args and **kwargs"),
    (lambda acc, **kw: acc, "*args and **kwargs"),
    (lambda acc: {"out": acc}, "no 'output' entry"),
    (lambda acc: {"output": acc, 3: acc}, "output names must be identifiers"),
    (lambda acc: {"output": acc, "a b": acc}, "output names must be identifiers"),
    (lambda acc: {"output": coda.row_sum(acc)}, "'output' must be a tile"),
    (lambda acc: coda.row_sum(acc), "'output' must be a tile"),
    (lambda acc: "gelu", "expected an epilogue value or a number, got str"),
    (lambda acc: {"output": acc, "x": None}, "got NoneType"),
    (lambda acc: coda.gelu(acc, acc), "gelu takes 1 argument, got 2"),
    (lambda acc: coda.where(acc, acc), "where takes 3 arguments, got 2"),
    (lambda acc: {"output": acc, "s": coda.row_sum(acc, acc)}, "row_sum takes 1 argument, got 2"),
    (lambda acc: coda.unpack(acc, acc)[0], "unpack takes 1 argument, got 2"),
    # arguments by keyword (Python's TypeError named an inner function and blamed torch)
    (lambda acc: coda.dropout(acc, p=0.1), "coda.dropout takes its arguments by position, as in "
                                           "coda.dropout(x, p), not by keyword (p=)"),
    (lambda acc: coda.gelu(x=acc), "coda.gelu takes its arguments by position"),
    (lambda acc: {"output": acc, "s": coda.row_sum(x=acc)}, "coda.row_sum takes its arguments"),
    (lambda acc: coda.silu(coda.unpack(acc)), "coda.unpack gives two values: `gate, up = coda.unpack"),
    (lambda acc: 2 ** acc, "no power operator"),
    (lambda acc: coda.gelu(True), "got bool"),
    (lambda acc: acc * {"a": 1}, "got dict"),
    (lambda acc: coda.rope(acc, acc, acc), "rope's cos and sin must be operands"),
    (lambda acc, c: coda.rope(acc, c * 2, c), "rope's cos and sin must be operands"),
    # reductions are outputs: they cannot be computed with (read back, or nested)
    (lambda acc: acc * coda.row_sum(acc), "row_sum(...) is an output"),
    (lambda acc: coda.row_sum(acc) + 1, "row_sum(...) is an output"),
    (lambda acc: -coda.col_max(acc), "col_max(...) is an output"),
    (lambda acc: coda.gelu(coda.col_sum(acc)), "col_sum(...) is an output"),
    (lambda acc: coda.where(coda.row_max(acc) > 0, acc, 0), "row_max(...) is an output"),
    (lambda acc: {"output": acc, "s": coda.row_sum(coda.row_sum(acc))}, "row_sum(...) is an output"),
    (lambda acc: {"output": acc, "z": coda.row_logsumexp(acc) ** 2}, "row_logsumexp(...) is an output"),
    (lambda acc: {"output": acc, "s": abs(coda.row_sum(acc))}, "row_sum(...) is an output"),
    (lambda acc: {"output": acc, "s": 2 // coda.row_sum(acc)}, "row_sum(...) is an output"),
    (lambda acc: (coda.gelu(acc), acc), "returned a tuple; return the output alone, or a dict"),
    (lambda acc: {"s": coda.row_sum(acc)}, "no 'output' entry (to compute only reductions, return "
                                           "'output': acc too and launch with outputs=['s']"),
    (lambda acc: acc if acc > 0 else -acc, "has no truth value"),
    (lambda acc: max(acc, 0.0), "coda.max / coda.min instead of Python's max / min"),
    (lambda acc: acc ** 2, "no power operator: write x * x or coda.square(x)"),
    # tensor methods: what an epilogue writes instead, as a DslError (not an AttributeError)
    (lambda acc: acc.exp(), "no attribute 'exp': write coda.exp(x), not x.exp()"),
    (lambda acc: acc.sum(-1), "no attribute 'sum': reductions are outputs: coda.row_sum(x)"),
    (lambda acc: acc.max(), "no attribute 'max': reductions are outputs"),
    (lambda acc: acc.float(), "values are float32 already"),
    (lambda acc: acc.T, "values have no shape"),
    (lambda acc: acc.whatever, "no attribute 'whatever': use coda's functions"),
    (lambda acc: acc and acc, "has no truth value"),
    # torch's and math's functions take no symbolic values
    (lambda acc: torch.exp(acc), "use coda's functions on them"),
    (lambda acc: math.exp(acc), "use coda's functions on them"),
    (lambda acc: {acc: 1}, "unhashable"),
])
def test_tracer_errors_are_coda_errors(fn, fragment):
    with pytest.raises(coda.DslError) as info:
        coda.epilogue(fn)
    assert fragment in info.value.message   # not the quoted source line, which holds the fragment


def test_integers_beyond_float_range_are_infinite_as_the_literal_1e400():
    def constant(acc):
        return acc * 10**400

    def default(acc, s=-(10**400)):
        return acc * s

    a, b = torch.ones(2, 3), torch.ones(3, 4)
    assert torch.equal(coda.epilogue(constant).reference(a, b)["output"], torch.full((2, 4), torch.inf))
    assert torch.equal(coda.epilogue(default).reference(a, b)["output"], torch.full((2, 4), -torch.inf))
    prog = coda.compile("EPILOGUE (s: scalar) { output = input * s; }")
    assert torch.equal(prog.reference(a, b, s=10**400)["output"], torch.full((2, 4), torch.inf))


def test_abs_is_the_primitive():
    prog = coda.epilogue(lambda acc: abs(acc - 1.0))
    a, b = torch.randn(5, 3), torch.randn(3, 4)
    torch.testing.assert_close(prog(a, b, backend="reference")["output"], (a @ b - 1.0).abs())


def test_other_languages_functions_are_named_on_the_module():
    """A missing `coda.NAME` is a DslError that says what to write (so `except coda.CodaError`
    catches it in an epilogue function) and an AttributeError (so `hasattr` works)."""
    for error in (coda.DslError, AttributeError):
        with pytest.raises(error, match=r"no attribute 'sum'; write row_sum\(x\)"):
            coda.epilogue(lambda acc: {"output": acc, "s": coda.sum(acc)})
        with pytest.raises(error, match="no attribute 'gleu' \\(did you mean 'gelu'\\?\\)"):
            coda.gleu  # noqa: B018
    assert not hasattr(coda, "nothing") and getattr(coda, "_private", 7) == 7
    with pytest.raises(AttributeError) as info:
        coda.__wrapped__  # noqa: B018
    assert not isinstance(info.value, coda.CodaError)


def test_ops_and_nn_need_no_import_of_their_own():
    """In a fresh process, `import coda` alone gives `coda.ops` and `coda.nn`."""
    import subprocess
    import sys
    code = "import coda; print(coda.ops.linear.__name__, coda.nn.layer_norm.__name__)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.split() == ["linear", "layer_norm"], result.stderr


def test_bad_annotations_and_defaults():
    def bad_kind(acc, bias: "column"):  # noqa: F821
        return acc + bias

    def bad_default(acc, bias="zero"):
        return acc + bias

    with pytest.raises(coda.DslError, match="has kind 'column'"):
        coda.epilogue(bad_kind)
    with pytest.raises(coda.DslError, match="default that is not a number") as info:
        coda.epilogue(bad_default)
    # a parameter's fault is located at the function's definition, as the rest of its errors
    assert info.value.loc == Loc(bad_default.__code__.co_firstlineno, 1, __file__)


def test_positional_only_operands_are_refused_and_a_positional_only_result_is_fine():
    def scaled(acc, p, /):
        return acc * p

    def accumulate(acc, output, /):
        return acc + output

    def fine(acc, /, p):
        return acc * p

    for fn, name in ((scaled, "p"), (accumulate, "output")):
        with pytest.raises(coda.DslError, match=f"parameter '{name}' is positional-only"):
            coda.epilogue(fn)
    a, b = torch.randn(3, 2), torch.randn(2, 4)
    torch.testing.assert_close(coda.epilogue(fine).reference(a, b, p=2.0)["output"], (a @ b) * 2)


@pytest.mark.parametrize(("operand", "words"), [
    ("input", "'input' is the GEMM result"), ("acc", "'acc' is the GEMM result"),
    ("gelu", "'gelu' is reserved"), ("save", "'save' is reserved")])
def test_reserved_names_are_no_operands_of_a_function_either(operand, words):
    """The text DSL's reserved names (the GEMM result's, the primitives', its keywords) name no
    operand of a traced function: the two front ends accept the same programs."""
    ns = {"coda": coda}
    exec(f"def f(x, {operand}: coda.tile):\n    return x + {operand}\n", ns)
    with pytest.raises(coda.DslError, match=words):
        coda.epilogue(ns["f"])


def test_what_is_not_an_epilogue_function():
    with pytest.raises(coda.DslError, match="takes a function, got int"):
        coda.epilogue(3)
    with pytest.raises(coda.DslError, match="cannot read the parameters of"):
        coda.epilogue(max)


def test_tracer_errors_from_the_passes():
    def mixes(acc):
        gate, _ = coda.unpack(acc)
        return gate + acc

    def prob_not_scalar(acc):
        return coda.dropout(acc, acc)

    def prob_out_of_range(acc):
        return coda.dropout(acc, 1.5)

    with pytest.raises(coda.DslError, match="mixes an"):
        coda.epilogue(mixes)
    with pytest.raises(coda.DslError, match="probability must be a scalar"):
        coda.epilogue(prob_not_scalar)
    with pytest.raises(coda.DslError, match=r"outside \[0, 1\]"):
        coda.epilogue(prob_out_of_range)


def test_errors_from_the_passes_are_located_in_the_function():
    """What the passes find in traced IR (mixed domains, a bad dropout probability, arithmetic on
    a wide pack, a mis-declared operand) is located as a mistake in DSL text is: at the expression
    that built the value, or, for an operand's kind, the function's definition; not unlocated."""
    def mixes(acc):
        gate, _ = coda.unpack(acc)
        return gate + acc

    def prob(acc):
        return coda.dropout(acc, 1.5)

    def wide(acc):
        return {"output": acc, "d": coda.pack(acc, acc) * 2}

    def table(acc, c: coda.col, s: coda.head):
        return coda.rope(acc, c, s)

    for fn, text, fragment in [(mixes, "gate + acc", "`add` mixes an [M, N] value"),
                               (prob, "coda.dropout(acc, 1.5)", "outside [0, 1]"),
                               (wide, "coda.pack(acc, acc) * 2", "can only be stored as an output"),
                               (table, None, "declared `col` but a rope table needs kind `head`")]:
        with pytest.raises(coda.DslError) as info:
            coda.epilogue(fn)
        first = fn.__code__.co_firstlineno
        line = first if text is None else next(
            n for n in range(first, first + 4) if text in linecache.getline(__file__, n))
        col = 1 if text is None else linecache.getline(__file__, line).index(text) + 1
        assert info.value.loc == Loc(line, col, __file__), str(info.value)
        assert fragment in info.value.message
        assert str(info.value).splitlines()[1] == f"    {linecache.getline(__file__, line).rstrip()}"


def test_errors_are_located_without_columns(monkeypatch):
    """Python 3.10's tracebacks have no columns (FrameSummary.colno came in 3.11): a mistake is
    still located, at column 1 of its line, not an AttributeError."""
    import traceback
    from types import SimpleNamespace

    extract = traceback.extract_tb
    monkeypatch.setattr(traceback, "extract_tb", lambda tb: [
        SimpleNamespace(filename=f.filename, lineno=f.lineno) for f in extract(tb)])

    def squares(acc):
        return acc ** 2

    with pytest.raises(coda.DslError) as info:
        coda.epilogue(squares)
    assert info.value.loc == Loc(squares.__code__.co_firstlineno + 1, 1, __file__)


def test_module_exports_every_primitive():
    from coda.primitives import PRIMITIVES

    for name in PRIMITIVES:
        assert callable(getattr(coda, name)), name
        assert name in coda.__all__


def test_errors_in_a_traced_function_name_its_file_line_and_column():
    """A mistake inside an epilogue function is located in its Python source (the expression
    that raised it) and quoted with a caret, as a mistake in DSL text is; one in what it returns
    at the function's first line."""
    def squares(acc, w: coda.col):
        h = acc * w
        return {"output": h ** 2}

    with pytest.raises(coda.DslError) as info:
        coda.epilogue(squares)
    line = squares.__code__.co_firstlineno + 2
    text = linecache.getline(__file__, line)
    col = text.index("h ** 2") + 1
    assert info.value.loc == Loc(line, col, __file__)
    assert str(info.value).splitlines()[1:] == [f"    {text.rstrip()}", " " * (3 + col) + "^"]

    def pair(acc):
        return acc, acc

    with pytest.raises(coda.DslError) as info:
        coda.epilogue(pair)
    assert info.value.loc == Loc(pair.__code__.co_firstlineno, 1, __file__)
    assert "def pair(acc):" in str(info.value)


def test_a_value_kept_from_another_traced_function_is_refused():
    """A value built in one traced function and used by another reads operands (or the prior
    output) that the second does not have: it raised a bare KeyError in the passes, or, for the
    prior output, made the program accumulate into an out= the function never named."""
    kept = {}

    @coda.epilogue
    def first(acc, x, output):
        kept["operand"], kept["prior"] = acc + x, output + acc
        return acc

    with pytest.raises(coda.DslError, match="the result reads operand 'x', which is not a parameter"):
        coda.epilogue(lambda acc: kept["operand"] * 2.0)
    with pytest.raises(coda.DslError, match=r"the result reads the prior output \(`output`\), which is not"):
        coda.epilogue(lambda acc: kept["prior"] * 2.0)
