"""Property-based tests (Hypothesis).

1. Garbage in: random token and character soups, and random edits of valid programs, either
   compile or raise `coda.CodaError`; whatever compiles also launches or raises `coda.CodaError`.
2. Random well-formed programs (expression trees over `input`, tile/row/col/scalar operands,
   constants and every element-wise primitive, with locals, saves, reductions, dropout and
   accumulation) compile, give the same IR when written as a traced Python function, and match a
   float64 evaluation of the same tree written in this file (via `oracle.ELEMENTWISE`).
"""

from __future__ import annotations

import os

import numpy as np
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import coda
from coda.ir import format_epilogue
from coda.primitives import KINDS, PRIMITIVES
from oracle import (
    ELEMENTWISE,
    REDUCTIONS,
    call,
    dropout_mask_from_rng,
    dsl_text,
    guarded,
    launch_inputs,
    np64,
    random_values,
    without_unread_lets,
)

#: CODA_FUZZ_EXAMPLES=5000 for a longer search than CI's.
FUZZ = settings(max_examples=int(os.environ.get("CODA_FUZZ_EXAMPLES", "150")), deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# 1. garbage in ---------------------------------------------------------------------------------------

TOKENS = ["EPILOGUE", "save", "input", "acc", "output", "x", "y", "bias", "p", "gate", "up", "s",
          *PRIMITIVES, *KINDS, "0", "1", "2.5", "1e3", ".5", "1e-3", "7.", "+", "-", "*", "/", "<", "<=",
          ">", ">=", "==", "!=", "=", "+=", "(", ")", "{", "}", ",", ";", ":", "# c\n", "// c\n",
          "\n", "@", "$", "é", "\t", "'", '"', "\\", "[", "]", "**", "!", "&&", "1e999", "0x1F"]

VALID = [
    "EPILOGUE bias_gelu(bias: col, residual: tile, p: scalar) { h = input + bias; save preact = h; "
    "output = dropout(gelu(h), p) + residual; ss = row_sum(output * output); }",
    "EPILOGUE { gate, up = unpack(input); output = silu(gate) * up; }",
    "EPILOGUE (cos: head, sin: head) { output = rope(input, cos, sin); }",
    "output += input * alpha; m = col_max(input); l = row_logsumexp(input);",
    "y = where(input > 0, input, 0.01 * input); output = min(max(y, -c), c) / (1 + abs(r));",
]
VALID_TOKENS = [coda.dsl.lexer.tokenize(src)[:-1] for src in VALID]


def _compile_or_coda_error(source: str):
    try:
        return coda.compile(source)
    except coda.CodaError as err:
        assert str(err)
        return None


def _launch_or_coda_error(prog, m: int, n: int, seed: int) -> None:
    """Launch a program that compiled with plausible operands: it runs, or raises CodaError."""
    a, b = launch_inputs(m, n, 3, seed=seed)
    g = torch.Generator().manual_seed(seed)
    operands = {}
    for name, param in prog.ir.params.items():
        width = n // 2 if "half" in prog.widths.operands.get(name, ()) else n
        operands[name] = {
            "scalar": 0.25, "row": random_values((m,), "any", g), "col": random_values((width,), "any", g),
            "head": random_values((m, 2), "any", g), "tile": random_values((m, width), "any", g),
            None: random_values((m, width), "any", g),
        }[param.kind]
    kwargs = {"seed": seed}
    if prog.ir.accumulates:
        kwargs["out"] = torch.zeros(m, n // 2 if prog.widths.outputs["output"] == "half" else n,
                                    dtype=torch.float64)
    try:
        outs = prog.reference(a, b, **kwargs, **operands)
    except coda.CodaError:
        return
    assert list(outs) == prog.output_names


@FUZZ
@given(st.lists(st.sampled_from(TOKENS), max_size=40), st.sampled_from([" ", "", "\n"]))
def test_token_soup_raises_only_coda_errors(tokens, sep):
    prog = _compile_or_coda_error(sep.join(tokens))
    if prog is not None:
        _launch_or_coda_error(prog, 3, 4, 0)


@FUZZ
@given(st.text(alphabet=st.sampled_from([*"abinputogelsaveEPILOGUE_ 0123456789.e+-*/<>=!(){},;:#/\n",
                                         "\x00", "é", "\u2028", "@"]), max_size=80))
def test_character_soup_raises_only_coda_errors(text):
    _compile_or_coda_error(text)


@st.composite
def _edited_valid_program(draw):
    tokens = [t.text for t in draw(st.sampled_from(VALID_TOKENS))]
    for _ in range(draw(st.sampled_from([0, 1, 1, 1, 2, 3]))):
        action = draw(st.sampled_from(["delete", "insert", "replace", "swap"]))
        i = draw(st.integers(0, max(len(tokens) - 1, 0)))
        if action == "delete" and tokens:
            del tokens[i]
        elif action == "insert":
            tokens.insert(i, draw(st.sampled_from(TOKENS)))
        elif action == "replace" and tokens:
            tokens[i] = draw(st.sampled_from(TOKENS))
        elif action == "swap" and len(tokens) > 1:
            j = draw(st.integers(0, len(tokens) - 1))
            tokens[i], tokens[j] = tokens[j], tokens[i]
    return " ".join(tokens)


@FUZZ
@given(_edited_valid_program(), st.integers(1, 5), st.sampled_from([2, 4, 6]), st.integers(0, 2**32 - 1))
def test_edited_valid_programs_raise_only_coda_errors(source, m, n, seed):
    prog = _compile_or_coda_error(source)
    if prog is not None:
        _launch_or_coda_error(prog, m, n, seed)


def test_deeply_nested_programs_raise_coda_errors():
    for source in ["output = " + "(" * 3000 + "input" + ")" * 3000 + ";",
                   "output = " + "-" * 3000 + "input;",
                   "output = input" + " + 1" * 3000 + ";"]:
        _compile_or_coda_error(source)


# 2. random well-formed programs against an independent evaluation -----------------------------------

OPERANDS = ("input", "t", "r", "c", "s")
CONSTS = (0.0, 1.0, -1.0, 0.5, 2.0, 3.0, -2.5, 0.25)
GUARDED = {"log", "sqrt", "rsqrt", "exp", "div"}
UNARY = sorted(n for n, (_, d) in ELEMENTWISE.items() if len(d) == 1)
BINARY = sorted(n for n, (_, d) in ELEMENTWISE.items() if len(d) == 2)
TERNARY = sorted(n for n, (_, d) in ELEMENTWISE.items() if len(d) == 3)
REDUCTION_NAMES = sorted(REDUCTIONS)


def _expressions(local_names):
    leaves = [st.sampled_from(OPERANDS).map(lambda v: ("var", v)),
              st.sampled_from(CONSTS).map(lambda v: ("const", v))]
    if local_names:
        leaves.append(st.sampled_from(local_names).map(lambda v: ("var", v)))

    def extend(children):
        unary = st.builds(lambda f, x: guarded(f, (x,)), st.sampled_from(UNARY), children)
        binary = st.builds(lambda f, x, y: guarded(f, (x, y)), st.sampled_from(BINARY), children, children)
        return st.one_of(
            unary, binary, unary, binary,
            st.builds(lambda f, x, y, z: guarded(f, (x, y, z)), st.sampled_from(TERNARY), children,
                      children, children),
            st.builds(lambda x, p: call("dropout", x, ("const", p)), children,
                      st.sampled_from([0.0, 0.25, 0.5])),
        )

    return st.recursive(st.one_of(*leaves), extend, max_leaves=7)


@st.composite
def _programs(draw):
    """A list of statements: (kind, name, tree) with kind "let", "save", a reduction name,
    "output" or "accumulate"."""
    statements, local_names = [], []
    for i in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(["let", "let", "save", "reduce"]))
        tree = draw(_expressions(tuple(local_names)))
        if kind == "let":
            statements.append(("let", f"v{i}", tree))
            local_names.append(f"v{i}")
        elif kind == "save":
            statements.append(("save", f"sv{i}", tree))
            local_names.append(f"sv{i}")
        else:
            statements.append((draw(st.sampled_from(REDUCTION_NAMES)), f"rd{i}", tree))
    final = draw(st.sampled_from(["output", "output", "accumulate"]))
    statements.append((final, "output", draw(_expressions(tuple(local_names)))))
    return without_unread_lets(statements)


def _program_text(statements) -> str:
    lines = ["EPILOGUE fz(t: tile, r: row, c: col, s: scalar) {"]
    for kind, name, tree in statements:
        if kind == "let" or kind == "output":
            lines.append(f"  {name} = {dsl_text(tree)};")
        elif kind == "save":
            lines.append(f"  save {name} = {dsl_text(tree)};")
        elif kind == "accumulate":
            lines.append(f"  output += {dsl_text(tree)};")
        else:
            lines.append(f"  {name} = {kind}({dsl_text(tree)});")
    return "\n".join([*lines, "}"])


def _traced(tree, env):
    """The tree as traced values: Python operators where the left operand is a value."""
    if tree[0] == "var":
        return env[tree[1]]
    if tree[0] == "const":
        return tree[1]
    _, name, args = tree
    vals = [_traced(a, env) for a in args]
    is_value = isinstance(vals[0], coda.dsl.tracer.Value)
    if name in ("add", "sub", "mul", "div") and (is_value or isinstance(vals[1], coda.dsl.tracer.Value)):
        return {"add": lambda x, y: x + y, "sub": lambda x, y: x - y, "mul": lambda x, y: x * y,
                "div": lambda x, y: x / y}[name](*vals)
    if name in ("lt", "le", "gt", "ge", "eq", "ne") and is_value:
        return {"lt": lambda x, y: x < y, "le": lambda x, y: x <= y, "gt": lambda x, y: x > y,
                "ge": lambda x, y: x >= y, "eq": lambda x, y: x == y, "ne": lambda x, y: x != y}[name](*vals)
    if name == "neg" and is_value:
        return -vals[0]
    return getattr(coda, name)(*vals)


def _traced_program(statements):
    def body(acc, t, r, c, s, output=None):
        env = {"input": acc, "t": t, "r": r, "c": c, "s": s}
        result = {}
        for kind, name, tree in statements:
            value = _traced(tree, env)
            if kind == "accumulate":
                value = output + value
            if kind in REDUCTIONS:
                result[name] = getattr(coda, kind)(value)
            else:
                env[name] = value
                if kind != "let":
                    result[name] = value
        return {"output": result.pop("output"), **result}

    if statements[-1][0] == "accumulate":
        def fz(acc, output, t: coda.tile, r: coda.row, c: coda.col, s: coda.scalar):
            return body(acc, t, r, c, s, output)
    else:
        def fz(acc, t: coda.tile, r: coda.row, c: coda.col, s: coda.scalar):
            return body(acc, t, r, c, s)
    return coda.epilogue(fz)


def _evaluate(tree, env, m, n, seed, scale):
    """float64 NumPy evaluation of a tree; `scale` collects the largest magnitude seen."""
    if tree[0] == "var":
        value = env[tree[1]]
    elif tree[0] == "const":
        value = np.float64(tree[1])
    else:
        _, name, args = tree
        vals = [_evaluate(a, env, m, n, seed, scale) for a in args]
        if name == "dropout":
            x, p = np.broadcast_to(vals[0], (m, n)), float(vals[1])
            value = np.where(dropout_mask_from_rng(seed, p, m, n), x / (1 - p), 0.0)
        else:
            value = ELEMENTWISE[name][0](*vals)
    scale.append(float(np.max(np.abs(value))))
    return value


@FUZZ
@given(_programs(), st.integers(1, 7), st.integers(1, 7), st.integers(1, 4), st.integers(0, 2**32 - 1),
       st.integers(0, 2**16))
def test_random_programs_match_an_independent_evaluation(statements, m, n, k, seed, data_seed):
    text = _program_text(statements)
    prog = coda.compile(text)
    traced = _traced_program(statements)
    assert format_epilogue(prog.ir) == format_epilogue(traced.ir), text

    a, b = launch_inputs(m, n, k, seed=data_seed, domain="int")
    g = torch.Generator().manual_seed(data_seed)
    ops = {"t": random_values((m, n), "any", g), "r": random_values((m,), "any", g),
           "c": random_values((n,), "any", g), "s": float(random_values((), "any", g))}
    prior = random_values((m, n), "any", g)
    env = {"input": np64(a) @ np64(b), "t": np64(ops["t"]), "r": np64(ops["r"])[:, None],
           "c": np64(ops["c"])[None, :], "s": np.float64(ops["s"])}

    want, scale = {}, [1.0]
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        for kind, name, tree in statements:
            value = _evaluate(tree, env, m, n, seed, scale)
            if kind == "accumulate":
                value = np64(prior) + value
            full = np.broadcast_to(value, (m, n))
            if kind in REDUCTIONS:
                want[name] = REDUCTIONS[kind](full)
            else:
                env[name] = value
                if kind != "let":
                    want[name] = full

    out = prior.clone() if prog.ir.accumulates else None
    got = prog.reference(a, b, seed=seed, out=out, **ops)
    got_traced = traced.reference(a, b, seed=seed, out=None if out is None else prior.clone(), **ops)
    assert list(got) == ["output", *(name for kind, name, _ in statements if kind not in ("let", "output",
                                                                                          "accumulate"))]
    magnitude = max(s for s in scale if np.isfinite(s))
    for name, expected in want.items():
        assert torch.equal(got[name], got_traced[name]), name
        atol = 1e-9 * magnitude * max(m, n)
        np.testing.assert_allclose(np64(got[name]), expected, rtol=1e-9, atol=atol,
                                   err_msg=f"{name} of\n{text}")
