"""Differential fuzzing of the Triton backend: random well-formed programs run through the real
generated kernels (the Triton interpreter on a CPU) and compared with a float64 evaluation of the
same tree written here (the formulas of `oracle.ELEMENTWISE`).

The programs reach what `test_fuzz.py`'s do not: the pair domain (`unpack`, `pack` back to [M, N]
or out to [M, 2N], `rope` with `head` tables), `row_index` / `col_index`, comparisons and
`where`, several reductions of every kind, of saved values too; and their launches vary the
shapes (awkward against the interpreter's 32x32x32 tiles), fp32 and fp16, transposed A and B,
leading dimensions of A, `prog.map`, `outputs=` subsets, `out=` buffers (NaN-poisoned), `+=`
into an existing tensor and scalars as 0-d tensors.

The tolerance is the float32 error the same tree can have, bounded on the tree itself: the
float64 evaluation carries, for every value, a first-order bound on that error, its arguments'
bounds times the function's slopes there plus its own rounding (a few float32 ulps; for the
transcendental functions whose formulas cancel or approximate, an absolute error too), and an
element may be off by twice its bound, plus the rounding of an fp16 output. Catastrophic
cancellation then widens the tolerance exactly where it occurs. The GEMM is exact: A and B hold
small integers, whose products and sums float32 and fp16 GEMMs (float32 accumulation) compute
without rounding, so the tolerance owes nothing to K. Discontinuities cannot be bounded so (a
comparison that flips is off by 1, not by an ulp), so the inputs rule them out: a comparison, a
`where` condition or a `relu_grad` only ever sees values built exactly from integers (the GEMM's
result, integer operands, row and column indices, +, -, *, min, max, ...), which every backend
computes without rounding.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import coda
from coda.runtime.program import interpreter_enabled
from oracle import (
    ELEMENTWISE,
    REDUCTIONS,
    call,
    dropout_mask_from_rng,
    dsl_text,
    guarded,
    names_in,
    np64,
    without_unread_lets,
)

pytestmark = pytest.mark.skipif(not interpreter_enabled(), reason="needs TRITON_INTERPRET=1 on a CPU")

#: 60 examples take 20-30 s (the interpreter runs up to a few seconds a launch); CODA_FUZZ_EXAMPLES for more.
FUZZ = settings(max_examples=int(os.environ.get("CODA_FUZZ_EXAMPLES", "60")), deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.filter_too_much])

U32 = 2.0**-24   # float32's unit roundoff
#: Each computed node's own relative error, in units of U32: correctly rounded arithmetic 1 (or 0
#: where the result is one of the arguments), the rounding primitives their target's unit roundoff.
REL_ERROR = {"add": 1, "sub": 1, "mul": 1, "div": 2, "neg": 0, "abs": 0, "min": 0, "max": 0, "clamp": 0,
             "relu": 0, "where": 0, "square": 1, "round_bf16": 2.0**16, "round_fp16": 2.0**13}
#: The other functions, transcendental, are taken as f(x (1 + 2 U32)) (1 + 8 U32): their formulas
#: scale the argument first (exp(x) is exp2(x log2(e)), so its relative error grows with |x|), and
#: NumPy's float32 functions (under the interpreter) are within a few ulps. Those whose formulas
#: cancel (tanh from e^(-2|x|), 1 - t^2, sigmoid's complements, log(1 + e^x)) or approximate
#: (Abramowitz & Stegun's erf, to 6e-7) have an absolute error as well, 16 U32 (1 + |x|)^2: the
#: square for the products by x and x^2 around the cancelling part.
ABSOLUTE = {"tanh", "tanh_grad", "sigmoid", "sigmoid_grad", "silu", "silu_grad", "gelu", "gelu_grad",
            "gelu_erf", "gelu_erf_grad", "softplus"}
#: The bound is first-order (a product of two errors, a slope that changes within the error's
#: reach, are left out): an element may be off by twice it.
BOUND_FACTOR = 2

#: Operands by column domain: `t`, `r`, `c`, `s` (and the pair domain's `th`, `ch`) hold arbitrary
#: values; `ti`, `ri` (and `tih`) small integers, usable where a value must be exact.
FULL_LEAVES, HALF_LEAVES = ("t", "c"), ("th", "ch")
SHARED_LEAVES = ("r", "s")
EXACT_FULL, EXACT_HALF, EXACT_SHARED = ("input", "ti"), ("tih",), ("ri",)
CONSTS = (0.0, 1.0, -1.0, 0.5, 2.0, 3.0, -2.5, 0.25)
INT_CONSTS = (0.0, 1.0, -1.0, 2.0, 3.0)
#: Functions that keep integer arguments exact, and those (comparisons, relu_grad) that may only
#: see exact arguments: elsewhere a rounding error could flip them.
EXACT_UNARY = ("neg", "abs", "relu", "square", "relu_grad", "round_fp16")
EXACT_BINARY = ("add", "sub", "mul", "min", "max", "lt", "le", "gt", "ge", "eq", "ne")
DISCONTINUOUS = {"lt", "le", "gt", "ge", "eq", "ne", "relu_grad"}
UNARY = sorted(n for n, (_, d) in ELEMENTWISE.items() if len(d) == 1 and n not in DISCONTINUOUS)
BINARY = sorted(n for n, (_, d) in ELEMENTWISE.items() if len(d) == 2 and n not in DISCONTINUOUS)
SIZES = (1, 2, 7, 33, 67, 130)
EVEN_SIZES = (2, 4, 36, 66, 132)


def _exact(leaves):
    """Trees over exact leaves whose every value is exact in float32 (small integers)."""
    def extend(children):
        return st.one_of(st.builds(call, st.sampled_from(EXACT_UNARY), children),
                         st.builds(call, st.sampled_from(EXACT_BINARY), children, children))
    return st.recursive(st.one_of(st.sampled_from(leaves).map(lambda v: ("var", v)),
                                  st.sampled_from(INT_CONSTS).map(lambda v: ("const", v))),
                        extend, max_leaves=3)


def _general(leaves, exact, rope: tuple[str, str] | None):
    """Trees over `leaves` with every continuous primitive, dropout, rope (with the tables
    `rope`: an operand meets one column domain), and exact subtrees in comparisons and `where`
    conditions."""
    def extend(children):
        options = [st.builds(lambda f, x: guarded(f, (x,)), st.sampled_from(UNARY), children),
                   st.builds(lambda f, x, y: guarded(f, (x, y)), st.sampled_from(BINARY), children, children),
                   st.builds(lambda c, x, y: call("where", c, x, y), exact, children, children),
                   st.builds(lambda lo, x: call("clamp", x, lo, call("add", lo, ("const", 1.5))),
                             children, children),
                   st.builds(lambda x, p: call("dropout", x, ("const", p)), children,
                             st.sampled_from([0.25, 0.5]))]
        if rope:
            options.append(children.map(lambda x: call("rope", x, *(("var", table) for table in rope))))
        return st.one_of(*options)

    base = st.one_of(st.sampled_from(leaves).map(lambda v: ("var", v)),
                     st.sampled_from(CONSTS).map(lambda v: ("const", v)), exact)
    return st.recursive(base, extend, max_leaves=6)


def _mentions(tree, names) -> bool:
    if tree[0] == "var":
        return tree[1] in names
    return tree[0] == "call" and any(_mentions(a, names) for a in tree[2])


@st.composite
def _programs(draw):
    """Statements (kind, name, tree, domain), kind "unpack", "let", "save", a reduction, "output" or
    "accumulate"; domain "full", "half" (the pair domain) or "double" (pack to [M, 2N]).

    A value that depends on neither `input` nor `unpack` takes the domain of what it meets, and an
    output or reduction of one is [M, N] (passes/widths.py): so a pair-domain tree that is stored
    or reduced always reads `g`, `u` or a local made from them, and its operands (`th`, `ch`,
    `tih`) are [M, N/2]."""
    statements = []
    domains = ["full"]
    locals_ = {"full": [], "half": []}
    exact_locals = {"full": [], "half": []}
    paired = {"g", "u"}   # the values in the pair domain by their own right
    index_domain = draw(st.sampled_from(["full", "half"]))   # col_index numbers one domain's columns
    rope_in = draw(st.sampled_from([(), ("full",), ("half",), ("full", "half")]))
    unpack_exact = False

    def tree(domain, exact_only=False, stored=False):
        exact_names = [*(EXACT_FULL if domain == "full" else EXACT_HALF), *EXACT_SHARED,
                       *exact_locals[domain]]
        if domain == "half" and unpack_exact:
            exact_names += ["g", "u"]
        index = ["row_index"] + ["col_index"] * (index_domain == domain)
        exact = _exact(exact_names).flatmap(lambda t: st.one_of(
            st.just(t), st.just(t), st.sampled_from(index).map(lambda f: call("add", t, call(f)))))
        if exact_only:
            value = draw(exact)
        else:
            names = [*exact_names, *(FULL_LEAVES if domain == "full" else HALF_LEAVES), *SHARED_LEAVES,
                     *locals_[domain]]
            names += ["input"] * 3 if domain == "full" else ["g", "u"] * 2   # the GEMM's result, often
            tables = (("cos", "sin") if domain == "full" else ("cosh", "sinh")) if domain in rope_in else None
            value = draw(_general(names, exact, tables))
        if stored and domain == "half" and not _mentions(value, paired):
            value = call("add", value, ("var", draw(st.sampled_from(["g", "u"]))))
        return value

    if draw(st.booleans()):
        unpack_exact = draw(st.booleans())
        statements.append(("unpack", ("g", "u"), tree("full", exact_only=unpack_exact), "full"))
        domains.append("half")
    for i in range(draw(st.integers(0, 4))):
        kind = draw(st.sampled_from(["let", "save", "reduce", "reduce"]))
        domain = draw(st.sampled_from(domains))
        exact = kind == "let" and draw(st.booleans())
        value = tree(domain, exact_only=exact, stored=kind != "let")
        if kind == "reduce":
            statements.append((draw(st.sampled_from(sorted(REDUCTIONS))), f"rd{i}", value, domain))
            continue
        name = f"v{i}" if kind == "let" else f"sv{i}"
        statements.append((kind, name, value, domain))
        (exact_locals if exact else locals_)[domain].append(name)
        if _mentions(value, paired):
            paired.add(name)
    final = draw(st.sampled_from(["output", "output", "accumulate", "pack_half", "pack_full"]))
    if final == "pack_half" and "half" in domains:
        pair = call("pack", tree("half", stored=True), tree("half", stored=True))
        statements.append(("output", "output", pair, "full"))
    elif final == "pack_full":
        statements.append(("output", "output", call("pack", tree("full"), tree("full")), "double"))
    else:
        domain = draw(st.sampled_from(domains))
        statements.append(("accumulate" if final == "accumulate" else "output", "output",
                           tree(domain, stored=True), domain))
    return without_unread_lets(statements)


KINDS = {"t": "tile", "ti": "tile", "th": "tile", "tih": "tile", "r": "row", "ri": "row", "c": "col",
         "ch": "col", "s": "scalar", "cos": "head", "sin": "head", "cosh": "head", "sinh": "head"}


def _program_text(statements) -> str:
    used = set()
    for _, _, tree, _ in statements:
        names_in(tree, used)
    params = [name for name in KINDS if name in used]
    lines = ["EPILOGUE fz(" + ", ".join(f"{p}: {KINDS[p]}" for p in params) + ") {"]
    for kind, name, tree, _ in statements:
        text = dsl_text(tree)
        if kind == "unpack":
            lines.append(f"  g, u = unpack({text});")
        elif kind in ("let", "output"):
            lines.append(f"  {name} = {text};")
        elif kind == "save":
            lines.append(f"  save {name} = {text};")
        elif kind == "accumulate":
            lines.append(f"  output += {text};")
        else:
            lines.append(f"  {name} = {kind}({text});")
    return "\n".join([*lines, "}"])


# the float64 evaluation, with a bound on float32's error ------------------------------------------
def _slope(formula, vals, i):
    """|d formula / d vals[i]|, the larger one-sided difference quotient (at a kink of abs, min,
    max, ... the steeper side)."""
    x = vals[i]
    h = 1e-6 * (1 + np.abs(x))
    at = formula(*vals)
    up = formula(*vals[:i], x + h, *vals[i + 1:])
    down = formula(*vals[:i], x - h, *vals[i + 1:])
    return np.maximum(np.abs(up - at), np.abs(at - down)) / h


class _Evaluator:
    """Evaluates trees in float64 over [m, width] arrays, each value with a first-order bound on
    the error float32 arithmetic can give it: its arguments' bounds times the slopes, plus its
    own rounding (REL_ERROR, TRANSCENDENTAL, ABSOLUTE). Exact subtrees have none."""

    def __init__(self, env, m, n, seed):
        self.env, self.m, self.n, self.seed = env, m, n, seed
        self.too_large = False   # an exact subtree's value past float32's integers

    def width(self, domain):
        return {"full": self.n, "half": self.n // 2, "double": 2 * self.n}[domain]

    def __call__(self, tree, domain):
        """(value, error bound) of `tree` in `domain`."""
        shape = (self.m, self.width(domain))
        if tree[0] == "var":
            value = self.env[tree[1]]
            if callable(value):   # a local, evaluated where it is read (it may be dead code)
                value = self.env[tree[1]] = value()
            return value
        if tree[0] == "const":
            return np.float64(tree[1]), 0.0
        _, name, args = tree
        if name == "row_index":
            return np.arange(self.m, dtype=np.float64)[:, None], 0.0
        if name == "col_index":
            return np.arange(shape[1], dtype=np.float64)[None, :], 0.0
        if name == "pack":
            inner = "half" if domain == "full" else "full"
            halves = [[np.broadcast_to(v, (self.m, self.width(inner))) for v in self(a, inner)] for a in args]
            value, bound = np.empty(shape), np.empty(shape)
            for parity, (v, e) in enumerate(halves):
                value[:, parity::2], bound[:, parity::2] = v, e
            return value, bound
        pairs = [self(a, domain) for a in args]
        vals, errs = [v for v, _ in pairs], [e for _, e in pairs]
        if name == "rope":
            return self.rope(np.broadcast_to(vals[0], shape), np.broadcast_to(errs[0], shape), *vals[1:])
        if name == "dropout":
            p = float(vals[1])
            keep = dropout_mask_from_rng(self.seed, p, *shape)
            value = np.where(keep, np.broadcast_to(vals[0], shape) / (1 - p), 0.0)
            return value, np.where(keep, errs[0] / (1 - p), 0.0) + 2 * U32 * np.abs(value)
        formula = ELEMENTWISE[name][0]
        value = formula(*vals)
        if self.exact(tree):
            self.too_large |= bool(np.any(np.abs(value) >= 2**24))   # exact in float32 no more
            return value, 0.0
        if name in DISCONTINUOUS:   # of exact arguments only
            return value, 0.0
        slopes = [1.0 if name.startswith("round") else _slope(formula, vals, i) for i in range(len(vals))]
        bound = sum(slope * e for slope, e in zip(slopes, errs, strict=True))
        bound = bound + REL_ERROR.get(name, 8) * U32 * np.abs(value)
        if name not in REL_ERROR:   # transcendental: the argument's own scaling too, f(x (1 + 2 U32))
            bound = bound + 2 * U32 * np.abs(vals[0]) * slopes[0]
        if name in ABSOLUTE:
            bound = bound + 16 * U32 * (1 + np.abs(vals[0])) ** 2
        return value, bound

    def rope(self, x, err, cos, sin):
        """Interleaved rope (oracle.rope) and its bound: each product and the sum rounded."""
        first, second = x[:, 0::2], x[:, 1::2]
        idx = np.arange(first.shape[1]) % cos.shape[1]
        c, s = cos[:, idx], sin[:, idx]
        value, bound = np.empty_like(x), np.empty_like(x)
        value[:, 0::2], value[:, 1::2] = first * c - second * s, second * c + first * s
        # each of the pair's outputs carries its own mix of the two inputs' errors: the second
        # takes the second input's times |c| (one bound for both understated it where the two
        # inputs' errors differ, as a clamp's exact constant beside a computed value's)
        err_first, err_second = err[:, 0::2], err[:, 1::2]
        bound[:, 0::2] = err_first * np.abs(c) + err_second * np.abs(s) + U32 * (
            np.abs(first * c) + np.abs(second * s))
        bound[:, 1::2] = err_second * np.abs(c) + err_first * np.abs(s) + U32 * (
            np.abs(second * c) + np.abs(first * s))
        return value, bound + U32 * np.abs(value)

    def exact(self, tree) -> bool:
        if tree[0] == "const":
            return tree[1] in INT_CONSTS
        if tree[0] == "var":
            return tree[1] in EXACT_FULL + EXACT_HALF + EXACT_SHARED or tree[1] in self.env.get("exact", ())
        return (tree[1] in ("row_index", "col_index")
                or (tree[1] in EXACT_UNARY + EXACT_BINARY and all(self.exact(a) for a in tree[2])))


def _reduce(kind, x, err):
    """A reduction of x [m, w] and its bound: the values' bounds (their largest for a maximum or
    a log-sum-exp, whose slopes add up to 1), plus float32's summation error."""
    value = REDUCTIONS[kind](x)
    axis = 1 if kind.startswith("row") else 0
    count = x.shape[axis]
    if kind in ("row_max", "col_max"):
        return value, err.max(axis=axis)
    if kind == "row_logsumexp":
        return value, err.max(axis=axis) + 8 * U32 * (count + np.abs(value))
    return value, err.sum(axis=axis) + 2 * U32 * count * np.abs(x).sum(axis=axis)


def _evaluate(statements, env, m, n, seed) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Each output's float64 value and bound on its float32 error."""
    env = dict(env, exact=set())
    ev = _Evaluator(env, m, n, seed)
    outs = {}

    def later(tree, domain, pick=None):
        def value():
            full = [np.broadcast_to(v, (m, ev.width(domain))) for v in ev(tree, domain)]
            return tuple(full if pick is None else (v[:, pick::2] for v in full))
        return value

    for kind, name, tree, domain in statements:
        if kind == "unpack":
            env["unpacked"] = later(tree, domain)
            env["g"], env["u"] = (later(("var", "unpacked"), domain, pick) for pick in (0, 1))
            if ev.exact(tree):
                env["exact"] |= {"g", "u"}
            continue
        if kind == "let":
            env[name] = later(tree, domain)
            if ev.exact(tree):
                env["exact"].add(name)
            continue
        value, err = (np.broadcast_to(v, (m, ev.width(domain))) for v in ev(tree, domain))
        if kind in REDUCTIONS:
            outs[name] = _reduce(kind, value, err)
            continue
        if kind == "accumulate":
            value = env["prior"] + value
            err = err + U32 * np.abs(value)
        env[name] = outs[name] = value, err
    assume(not ev.too_large)   # a comparison of such values could flip
    return {k: v for k, (v, _) in outs.items()}, {k: e for k, (_, e) in outs.items()}


# launching ----------------------------------------------------------------------------------------
@st.composite
def _launches(draw, statements):
    """Shape and launch options for a program: N even where the pair domain or rope needs it."""
    text = repr(statements)
    pairs = statements[0][0] == "unpack" or "'rope'" in text
    quads = "'cosh'" in text   # rope in the pair domain: N/2 even
    n = draw(st.sampled_from(EVEN_SIZES if pairs else SIZES))
    if quads and n % 4:
        n += 2
    return dict(m=draw(st.sampled_from(SIZES)), n=n, k=draw(st.sampled_from(SIZES)),
                dtype=draw(st.sampled_from([torch.float32, torch.float16])),
                layout=draw(st.sampled_from(["plain", "a_t", "b_t", "lead", "map"])),
                poison_out=draw(st.booleans()), scalar_tensor=draw(st.booleans()),
                out_fp32=draw(st.booleans()), subset=draw(st.integers(0, 2**16)),
                heads=draw(st.integers(1, 4)))


def _operands(prog, m, n, heads, dtype, g):
    """Values for the program's operands (pair-domain ones [M, N/2] or [N/2], as the program
    uses them: an operand in a local no output reads is [M, N])."""
    values = {}
    for name, param in prog.ir.params.items():
        width = n // 2 if prog.widths.operands.get(name) == {"half"} else n
        shape = {"tile": (m, width), "row": (m,), "col": (width,), "scalar": (),
                 "head": (m, heads)}[param.kind]
        x = (torch.randint(-3, 4, shape, generator=g).double() if name in ("ti", "tih", "ri")
             else torch.randn(shape, generator=g, dtype=torch.float64) * 1.5)
        values[name] = x.to(dtype)
    return values


def _run(prog, layout, a, b, x, out, kwargs) -> dict[str, torch.Tensor]:
    """The launch in `layout`: plain, A or B transposed (views), A with leading dimensions (M
    split in two or three, the operands and `out=` alike; results flattened back), or a map of x."""
    m, k = a.shape
    lead = next((d for d in (2, 3) if m % d == 0 and m > 1), None) if layout == "lead" else None
    if layout == "map":
        return prog.map(x, out=out, **kwargs)
    if lead is None:
        a, b = (t.T.contiguous().T if layout == f"{name}_t" else t for name, t in (("a", a), ("b", b)))
        return prog(a, b, out=out, **kwargs)
    rows = {name: v.reshape(lead, m // lead, *v.shape[1:])
            for name, v in kwargs.items() if KINDS.get(name) in ("tile", "row", "head")}
    got = prog(a.reshape(lead, m // lead, k), b, **(kwargs | rows),
               out=None if out is None else out.view(lead, m // lead, out.shape[1]))
    axes = {o.name: o.axis for o in prog.ir.outputs}
    return {name: t if axes[name] == "col" else t.reshape(m, *t.shape[2:]) for name, t in got.items()}


def compiled(statements) -> tuple[str, coda.Program]:
    """A drawn program's text and Program; a draw that writes the same dropout(r, p) in both
    column domains (one node after CSE, which compiling refuses) is discarded."""
    text = _program_text(statements)
    try:
        return text, coda.compile(text)
    except coda.DslError as err:
        assume("is used in both the [M, N] and the [M, N/2] column domain" not in str(err))
        raise


@FUZZ
@given(st.data(), _programs(), st.integers(0, 2**32 - 1), st.integers(0, 2**16))
def test_random_programs_on_the_triton_backend_match_float64(data, statements, seed, data_seed):
    text, prog = compiled(statements)
    launch = data.draw(_launches(statements))
    m, n, k, dtype = launch["m"], launch["n"], launch["k"], launch["dtype"]
    out_dtype = torch.float32 if launch["out_fp32"] else dtype
    g = torch.Generator().manual_seed(data_seed)
    a = torch.randint(-1, 2, (m, k), generator=g).to(dtype)
    b = torch.randint(-1, 2, (k, n), generator=g).to(dtype)
    x = torch.randint(-3, 4, (m, n), generator=g).to(dtype)   # a map's input
    ops = _operands(prog, m, n, launch["heads"], dtype, g)
    width = {"full": n, "half": n // 2, "double": 2 * n}[statements[-1][3]]
    prior = torch.randn(m, width, generator=g, dtype=torch.float64).to(out_dtype)

    names = ["output", *(name for kind, name, *_ in statements
                         if kind not in ("let", "unpack", "accumulate", "output"))]
    chosen = [name for i, name in enumerate(names)
              if (launch["subset"] >> i) & 1 or (name == "output" and prog.ir.accumulates)]
    outputs = chosen if chosen and chosen != names else None

    env = {"input": (np64(x) if launch["layout"] == "map" else np64(a) @ np64(b), 0.0), "prior": np64(prior)}
    for name, value in ops.items():   # (value, error bound): exact
        value = np64(value)
        env[name] = (value[:, None] if KINDS[name] == "row" else value[None, :] if KINDS[name] == "col"
                     else value), 0.0
    with np.errstate(all="ignore"):
        want, bound = _evaluate(statements, env, m, n, seed)
    tiles = [o.name for o in prog.ir.outputs if o.reduction is None]
    for name, value in want.items():   # overflows are not compared (nor fp16's: its range is small)
        assume(np.isfinite(value).all() and np.isfinite(bound[name]).all())
        assume(out_dtype == torch.float32 or name not in tiles or np.abs(value).max(initial=0) < 3e4)

    kwargs = dict(backend="triton", seed=seed, outputs=outputs, out_dtype=out_dtype)
    scalar = (lambda v: v.float()) if launch["scalar_tensor"] else float
    kwargs |= {name: scalar(v) if name == "s" else v for name, v in ops.items()}
    out = None
    if prog.ir.accumulates:
        out = prior.clone()
    elif launch["poison_out"] and (outputs is None or "output" in outputs):
        out = torch.full((m, width), float("nan"), dtype=out_dtype)
    got = _run(prog, launch["layout"], a, b, x, out, kwargs)
    assert list(got) == (outputs or names), text
    for name, tensor in got.items():
        expected = want[name]
        assert tensor.shape == expected.shape, (name, text)
        tol = BOUND_FACTOR * bound[name]
        if tensor.dtype == torch.float16:   # the stored value's rounding (and fp16's subnormals)
            tol = tol + 2.0**-11 * np.abs(expected) + 2.0**-25
        error = np.abs(np64(tensor) - expected)
        bad = ~(error <= tol)
        assert not bad.any(), (f"{name} off at {np.argwhere(bad)[:5].tolist()}: got "
                               f"{np64(tensor)[bad][:5]}, want {expected[bad][:5]} (tol {tol[bad][:5]})\n"
                               f"{text}\nlaunch {launch}")
