"""Constant folding, algebraic simplification, CSE and DCE, and that optimizing keeps the values."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import coda
from coda.dsl.lower import lower
from coda.dsl.parser import parse
from coda.ir import format_epilogue
from coda.passes import cse, dce, fold_constants, optimize, simplify
from oracle import ELEMENTWISE, REDUCTIONS, assert_close64, dropout_mask_from_rng, launch_inputs, np64


def _raw(source: str):
    return lower(parse(source), source)


def _opt(source: str) -> str:
    return format_epilogue(coda.compile(source).ir)


def _ops(epi) -> list[str]:
    return [n.op for n in epi.nodes()]


def _consts(epi) -> list[float]:
    return [n.arg for n in epi.nodes() if n.op == "const"]


# constant folding ----------------------------------------------------------------------------------


@pytest.mark.parametrize("expr, value", [
    ("2 + 3", 5.0),
    ("2 * 3 - 1", 5.0),
    ("-(2 * 3)", -6.0),
    ("7 / 2", 3.5),
    ("exp(0)", 1.0),
    ("sqrt(16) + log(1)", 4.0),
    ("max(2, 5) - min(2, 5)", 3.0),
    ("(1 < 2) + (2 <= 2) + (3 > 4) + (1 == 1) + (1 != 1) + (2 >= 3)", 3.0),
    ("where(0, 1, 2)", 2.0),
    ("where(-1, 1, 2)", 1.0),
    ("relu(-3) + abs(-2) + square(3)", 11.0),
    ("tanh(0) + sigmoid(0)", 0.5),
    ("rsqrt(4)", 0.5),
    ("gelu(0) + silu(0) + gelu_erf(0)", 0.0),
    ("relu_grad(2) + tanh_grad(0) + sigmoid_grad(0)", 2.25),
])
def test_constant_expressions_fold_to_one_constant(expr, value):
    epi = fold_constants(_raw(f"output = input * ({expr}) + t;"))
    consts = _consts(epi)
    assert len(consts) == 1 and math.isclose(consts[0], value, rel_tol=1e-15, abs_tol=1e-15)
    assert _ops(epi) == ["input", "const", "mul", "operand", "add"]


def test_folding_uses_float64_and_the_exact_formula():
    epi = fold_constants(_raw("output = input * gelu(1.5) + gelu_grad(0.5) * exp(1) / 3;"))
    gelu_15 = 0.5 * 1.5 * (1 + math.tanh(math.sqrt(2 / math.pi) * (1.5 + 0.044715 * 1.5**3)))
    u = math.sqrt(2 / math.pi) * (0.5 + 0.044715 * 0.125)
    dgelu_05 = (0.5 * (1 + math.tanh(u)) + 0.5 * 0.5 * (1 - math.tanh(u) ** 2) * math.sqrt(2 / math.pi)
                * (1 + 3 * 0.044715 * 0.25))
    a, b = _consts(epi)
    assert math.isclose(a, gelu_15, rel_tol=1e-15)
    assert math.isclose(b, dgelu_05 * math.e / 3, rel_tol=1e-15)


def test_non_elementwise_forms_are_not_folded():
    epi = fold_constants(_raw("output = dropout(2, 0.5) + input;"))
    assert "dropout" in _ops(epi)


def test_folding_through_the_tracer_matches_the_dsl():
    def k(acc):
        return acc * coda.exp(coda.log(2.0)) + coda.sqrt(9.0)

    assert _opt("EPILOGUE k { output = input * exp(log(2)) + sqrt(9); }") == \
        format_epilogue(coda.epilogue(k).ir)


# algebraic simplification ------------------------------------------------------------------------------


@pytest.mark.parametrize("expr, same_as", [
    ("input * 1", "input"),
    ("1 * input", "input"),
    ("input + -0.0", "input"),
    ("-0.0 + input", "input"),
    ("input - 0", "input"),
    ("input / 1", "input"),
    ("--input", "input"),
    ("-(-(-input))", "-input"),
    ("-0.0 - input", "-input"),
    ("input * -1", "-input"),
    ("-1 * input", "-input"),
    ("(input * 2) * 3", "input * 6"),
    ("2 * (input * 3)", "input * 6"),
    ("((input * 2) * 3) * 4", "input * 24"),
    ("(input * 0.5) * 2", "input"),
    ("(input * -1) * -1", "input"),
    ("-(input * 2)", "input * -2"),
    ("(-input) * 3", "input * -3"),
    ("-(-input * 2)", "input * 2"),
    ("dropout(input, 0)", "input"),
    ("dropout(input, 1 - 1)", "input"),
    ("gelu(input) * (3 - 2)", "gelu(input)"),
    ("input + (2 - 2) * t", "input + 0 * t"),      # x*0 is kept: it is NaN for infinite x
    ("(input + -0.0) * (t * 1) - 0", "input * t"),
    ("max(input, 0 * 3) + min(2, input)", "max(input, 0) + min(2, input)"),   # min, max keep their order
    ("(input == 1) + (2 != input)", "(input == 1) + (input != 2)"),
])
def test_identities(expr, same_as):
    assert _opt(f"output = {expr} + t;") == _opt(f"output = {same_as} + t;")


@pytest.mark.parametrize("expr", ["input * 0", "input - input", "input / 2", "2 - input",
                                  "input / input", "input + input", "dropout(input, 0.5)", "input < 2",
                                  "2 < input", "input * 2 + input * 3",
                                  "input + 0", "0 - input", "input - -0.0"])   # +0 where input is -0 (+0)
def test_inexact_rewrites_are_not_applied(expr):
    raw = optimize(_raw(f"output = {expr};"))
    assert format_epilogue(raw) == format_epilogue(cse(fold_constants(_raw(f"output = {expr};"))))


def test_comparisons_are_not_reordered():
    assert _opt("output = 2 < input;") != _opt("output = input < 2;")
    ops = _ops(coda.compile("output = 2 < input;").ir)
    assert ops == ["const", "input", "lt"]


def test_simplify_alone_and_after_folding():
    epi = simplify(_raw("output = (input * 1) - 0;"))
    assert _ops(epi) == ["input"]
    epi = simplify(_raw("output = input * (2 - 1);"))     # not folded yet: stays
    assert "mul" in _ops(epi)
    assert _ops(simplify(fold_constants(_raw("output = input * (2 - 1);")))) == ["input"]


# CSE and DCE ----------------------------------------------------------------------------------------


def _distinct_objects(epi, op: str) -> int:
    """How many distinct node objects with `op` the outputs reach (walking by identity)."""
    seen, stack = {}, [o.value for o in epi.outputs]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen[id(node)] = node
        stack.extend(node.args)
    return sum(1 for n in seen.values() if n.op == op)


def test_cse_makes_a_repeated_subexpression_one_node():
    src = ("output = gelu(input + bias) * gelu(input + bias);\n"
           "save s = gelu(input + bias) + exp(input * 2);\n"
           "r = row_sum(exp(input * 2));")
    raw = _raw(src)
    assert _distinct_objects(raw, "gelu") == 3 and _distinct_objects(raw, "exp") == 2
    assert _distinct_objects(raw, "input") > 1
    shared = cse(raw)
    assert _distinct_objects(shared, "gelu") == 1
    assert _distinct_objects(shared, "exp") == 1
    assert _distinct_objects(shared, "input") == 1
    assert _distinct_objects(shared, "operand") == 1
    prog = coda.compile(src)
    assert _distinct_objects(prog.ir, "gelu") == 1
    listing = format_epilogue(prog.ir)
    assert listing.count("= gelu") == 1 and listing.count("= exp") == 1


def test_cse_in_traced_functions():
    def k(acc, bias):
        return {"output": coda.gelu(acc + bias) * coda.gelu(acc + bias), "s": acc + bias}

    assert _distinct_objects(coda.epilogue(k).ir, "add") == 1


def test_cse_keeps_distinct_expressions_apart():
    prog = coda.compile("output = gelu(input + bias) * gelu(input - bias);")
    assert _distinct_objects(prog.ir, "gelu") == 2


def test_dce_drops_operands_of_dead_statements_only_if_undeclared():
    src = "output = input + bias;\noutput = output * unused;\noutput = input * keep;"
    raw = _raw(src)
    assert list(raw.params) == ["bias", "unused", "keep"]
    assert list(dce(raw).params) == ["keep"]
    prog = coda.compile(src)
    assert list(prog.ir.params) == ["keep"]
    assert "bias" not in format_epilogue(prog.ir)
    declared = coda.compile("EPILOGUE (bias: col, keep) { output = input + bias; output = input * keep; }")
    assert list(declared.ir.params) == ["bias", "keep"]      # declared: still bindable
    a, b = launch_inputs(3, 4, 2, seed=0)
    out = declared.reference(a, b, bias=torch.zeros(4, dtype=torch.float64), keep=2.0)["output"]
    assert torch.equal(out, (a @ b) * 2)


def test_dce_after_simplification_removes_operands_that_became_dead():
    prog = coda.compile("output = dropout(input, 0) + t - t * 0 + t;")
    assert "dropout" not in format_epilogue(prog.ir)
    prog = coda.compile("output = dropout(input * scale, 0);")
    assert list(prog.ir.params) == ["scale"]
    prog = coda.compile("output = input * unused;\noutput = input;")
    assert prog.ir.params == {}
    a, b = launch_inputs(3, 4, 2, seed=0)
    with pytest.raises(coda.LaunchError, match="unknown operand 'unused'"):
        prog.reference(a, b, unused=1.0)


def test_dead_statements_never_reach_the_ir():
    """(a value of `output` that a later assignment replaces unread: the only dead code the DSL
    allows, other locals must be read)"""
    epi = _raw("h = exp(input);\noutput = gelu(h);\noutput = input + 1;")
    assert "exp" not in _ops(epi) and "gelu" not in _ops(epi)


def test_optimize_is_idempotent():
    src = ("EPILOGUE (bias: col, p: scalar) { h = (input * 2) * 0.5 + bias * 1;\n"
           "save pre = h; output = dropout(gelu(h), p) + --h; s = row_sum(h * h); }")
    once = coda.compile(src).ir
    assert format_epilogue(optimize(once)) == format_epilogue(once)


# optimized programs compute the same values -----------------------------------------------------------


def _numpy_eval(epi, acc, operands, seed, m, n):
    """Evaluate an IR (full-width programs only) with the independent formulas of `oracle`."""
    env = {}
    for node in epi.nodes():
        args = [env[a] for a in node.args]
        if node.op == "input":
            value = acc
        elif node.op == "operand":
            value = operands[node.arg]
        elif node.op == "const":
            value = np.float64(node.arg)
        elif node.op == "dropout":
            x = np.broadcast_to(args[0], (m, n))
            p = float(args[1])
            keep = dropout_mask_from_rng(seed, p, m, n)
            value = np.where(keep, x / (1 - p), 0.0)
        else:
            value = ELEMENTWISE[node.op][0](*args)
        env[node] = value
    outs = {}
    for o in epi.outputs:
        x = np.broadcast_to(env[o.value], (m, n))
        outs[o.name] = REDUCTIONS[o.reduction](x) if o.reduction else x
    return outs


SIMPLIFIABLE = """
EPILOGUE (bias: col, r: row, t: tile, p: scalar) {
  h = (input * 2) * 0.25 + bias * 1 - 0;
  h2 = --h / 1 + 0 * 1;
  save pre = (h2 * 3) * (2 - 1);
  g = gelu(h2 + bias) * gelu(bias + h2);
  output = dropout(g, p) + dropout(t, 1 - 1) + (0 - r) * -1 + (r * 2) * 0.5;
  s = row_sum(-(g * 2) * 3);
  m = col_max(where(h > 0, h, 0.01 * h) + exp(0) - log(1));
  lse = row_logsumexp(-(-h));
}"""


@pytest.mark.parametrize("m, n, k", [(5, 7, 3), (1, 9, 1), (12, 5, 17)])
def test_optimized_program_matches_unoptimized_ir_and_formula(m, n, k):
    g = torch.Generator().manual_seed(m * 100 + n)
    a, b = launch_inputs(m, n, k, seed=m + n + k)
    ops = {"bias": torch.randn(n, generator=g, dtype=torch.float64),
           "r": torch.randn(m, generator=g, dtype=torch.float64),
           "t": torch.randn(m, n, generator=g, dtype=torch.float64), "p": 0.3}
    shaped = {"bias": np64(ops["bias"])[None, :], "r": np64(ops["r"])[:, None], "t": np64(ops["t"]),
              "p": np.float64(0.3)}
    acc = np64(a) @ np64(b)
    prog = coda.compile(SIMPLIFIABLE)
    raw = _raw(SIMPLIFIABLE)
    assert len(prog.ir.nodes()) < len(raw.nodes())
    got = prog.reference(a, b, seed=99, **ops)
    unoptimized = _numpy_eval(raw, acc, shaped, 99, m, n)
    optimized = _numpy_eval(prog.ir, acc, shaped, 99, m, n)
    for name in prog.output_names:
        assert_close64(got[name], unoptimized[name])
        assert_close64(optimized[name], unoptimized[name])
    # and the formula, written out by hand
    h = acc * 0.5 + shaped["bias"]
    gelu = ELEMENTWISE["gelu"][0]
    gg = gelu(h + shaped["bias"]) ** 2
    keep = dropout_mask_from_rng(99, 0.3, m, n)
    want = np.where(keep, gg / 0.7, 0.0) + shaped["t"] + 2 * shaped["r"]
    assert_close64(got["output"], want)
    assert_close64(got["pre"], h * 3)
    assert_close64(got["s"], (-6 * gg).sum(axis=1))
    assert_close64(got["m"], (np.where(h > 0, h, 0.01 * h) + 1).max(axis=0))
    top = h.max(axis=1, keepdims=True)
    assert_close64(got["lse"], (top + np.log(np.exp(h - top).sum(axis=1, keepdims=True)))[:, 0])


@pytest.mark.parametrize("source, folded", [
    ("input * 0.5 * 4.0", True), ("input * 1e30 * 1e30", False), ("input * 1e-30 * 1e-30", False),
    ("-(input * 1e25) * 1e25", False)])
def test_scales_fold_only_into_a_normal_float32_scale(source, folded):
    """(x*c1)*c2 -> x*(c1*c2) only where c1*c2 is a normal float32: folded into an overflowing
    or underflowing scale, 0 became NaN, 3e-39 inf and 1e30 0 where eager's two products are
    finite; both backends now give eager's values."""
    prog = coda.compile(f"EPILOGUE {{ output = {source}; }}")
    assert (_ops(prog.ir).count("mul") == 1) == folded
    x = torch.tensor([[0.0, 3e-39, 1e-20, 1e30, 300.0]])
    want = eval(source.replace("input", "x"))   # eager float32, product by product
    for backend in ("reference", "triton"):
        got = prog.map(x, backend=backend)["output"]
        torch.testing.assert_close(got, want, rtol=1e-6, atol=0, equal_nan=True, msg=backend)


def test_nan_through_relu_max_min_clamp_and_relu_grad_as_torch():
    """relu, max, min and clamp of NaN are NaN and relu_grad(NaN) is 1, as torch's relu and its
    backward (threshold_backward keeps the gradient unless x <= 0): relu_grad gave 0 on both
    backends, and the GPU's plain min and max return the operand that is not NaN
    (tests/gpu/test_triton_gpu.py runs this on the GPU)."""
    prog = coda.compile("EPILOGUE { save r = relu(input); save g = relu_grad(input);"
                        " save mx = max(input, 1.0); save mn = min(input, 1.0);"
                        " output = clamp(input, -1.0, 1.0); }")
    x = torch.tensor([[float("nan"), -2.0, 0.0, 3.0]])
    want = {"r": torch.relu(x), "mx": torch.maximum(x, torch.tensor(1.0)),
            "mn": torch.minimum(x, torch.tensor(1.0)), "output": x.clamp(-1.0, 1.0),
            "g": torch.tensor([[1.0, 0.0, 0.0, 1.0]])}
    for backend in ("reference", "triton"):
        outs = prog.map(x, backend=backend)
        for name, value in want.items():
            torch.testing.assert_close(outs[name], value, equal_nan=True, msg=f"{backend} {name}")
