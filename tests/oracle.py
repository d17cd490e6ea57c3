"""Independent float64 formulas for every CODA primitive, written out in NumPy.

Nothing here calls CODA's `ref` functions or `torch.nn.functional`: each primitive is the math of
its definition (GELU's tanh approximation, the derivatives by hand, logsumexp as max + log sum exp,
...), evaluated in NumPy float64, so a test compares CODA's reference backend with a second,
separately written implementation.

Also here: a pure-Python-int Philox2x32-10, and a few helpers shared by the test modules
(`conftest.py` puts this directory on `sys.path`).
"""

from __future__ import annotations

import math

import numpy as np
import torch

import coda
from coda.primitives import INFIX

SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
GELU_CUBIC = 0.044715
_erf = np.vectorize(math.erf, otypes=[np.float64])


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(SQRT_2_OVER_PI * (x + GELU_CUBIC * x**3)))


def _gelu_tanh_grad(x):
    # d/dx [0.5 x (1 + tanh(u))], u = k (x + c x^3):  0.5 (1 + tanh u) + 0.5 x sech^2(u) k (1 + 3 c x^2)
    u = SQRT_2_OVER_PI * (x + GELU_CUBIC * x**3)
    sech2 = 1.0 / np.cosh(u) ** 2
    return 0.5 * (1.0 + np.tanh(u)) + 0.5 * x * sech2 * SQRT_2_OVER_PI * (1.0 + 3.0 * GELU_CUBIC * x * x)


def _normal_cdf(x):
    return 0.5 * (1.0 + _erf(x / math.sqrt(2.0)))


def _normal_pdf(x):
    return np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)


def _round_bits(x, bits):
    """x rounded to `bits` significant bits, ties to even (numpy's round), for normal numbers."""
    m, e = np.frexp(x)   # x = m * 2**e, 0.5 <= |m| < 1
    return np.ldexp(np.round(m * 2.0**bits), e - bits)


def _b(cond):
    return np.where(cond, 1.0, 0.0)


#: name -> (formula over float64 arrays, domain of each argument).
#: Domains: "any" (real), "pos" (> 0), "nonzero", "int" (small integers, so that equality happens),
#: "mask" (values with many exact zeros: a `where` condition).
ELEMENTWISE = {
    "add": (lambda a, b: a + b, ("any", "any")),
    "sub": (lambda a, b: a - b, ("any", "any")),
    "mul": (lambda a, b: a * b, ("any", "any")),
    "div": (lambda a, b: a / b, ("any", "nonzero")),
    "neg": (lambda a: -a, ("any",)),
    "lt": (lambda a, b: _b(a < b), ("int", "int")),
    "le": (lambda a, b: _b(a <= b), ("int", "int")),
    "gt": (lambda a, b: _b(a > b), ("int", "int")),
    "ge": (lambda a, b: _b(a >= b), ("int", "int")),
    "eq": (lambda a, b: _b(a == b), ("int", "int")),
    "ne": (lambda a, b: _b(a != b), ("int", "int")),
    "where": (lambda c, a, b: np.where(c != 0, a, b), ("mask", "any", "any")),
    "min": (lambda a, b: np.where(a < b, a, b), ("any", "any")),
    "max": (lambda a, b: np.where(a > b, a, b), ("any", "any")),
    # max with lo first, then min with hi (lo > hi gives hi, as torch.clamp does)
    "clamp": (lambda x, lo, hi: np.where(np.where(x > lo, x, lo) < hi, np.where(x > lo, x, lo), hi),
              ("any", "any", "any")),
    "abs": (lambda x: np.where(x < 0, -x, x), ("any",)),
    "exp": (lambda x: np.exp(x), ("any",)),
    "log": (lambda x: np.log(x), ("pos",)),
    "sqrt": (lambda x: np.sqrt(x), ("pos",)),
    "rsqrt": (lambda x: 1.0 / np.sqrt(x), ("pos",)),
    "square": (lambda x: x * x, ("any",)),
    "erf": (_erf, ("any",)),
    "round_bf16": (lambda x: _round_bits(x, 8), ("any",)),
    "round_fp16": (lambda x: _round_bits(x, 11), ("any",)),
    "tanh": (lambda x: np.tanh(x), ("any",)),
    "sigmoid": (_sigmoid, ("any",)),
    "relu": (lambda x: np.where(x > 0, x, 0.0), ("any",)),
    "gelu": (_gelu_tanh, ("any",)),
    "gelu_erf": (lambda x: x * _normal_cdf(x), ("any",)),
    "silu": (lambda x: x * _sigmoid(x), ("any",)),
    # log(1 + e^x) = max(x, 0) + log(1 + e^-|x|): no overflow either way
    "softplus": (lambda x: np.where(x > 0, x, 0.0) + np.log1p(np.exp(-np.abs(x))), ("any",)),
    "tanh_grad": (lambda x: 1.0 / np.cosh(x) ** 2, ("any",)),
    # sigmoid' is even: exp(-|x|) / (1 + exp(-|x|))^2 never overflows
    "sigmoid_grad": (lambda x: np.exp(-np.abs(x)) / (1.0 + np.exp(-np.abs(x))) ** 2, ("any",)),
    "relu_grad": (lambda x: _b(x > 0), ("any",)),
    "gelu_grad": (_gelu_tanh_grad, ("any",)),
    "gelu_erf_grad": (lambda x: _normal_cdf(x) + x * _normal_pdf(x), ("any",)),
    "silu_grad": (lambda x: _sigmoid(x) + x * _sigmoid(x) * (1.0 - _sigmoid(x)), ("any",)),
}

#: The activations whose derivative is also a primitive (checked by finite differences too).
DERIVATIVES = {"tanh": "tanh_grad", "sigmoid": "sigmoid_grad", "relu": "relu_grad",
               "gelu": "gelu_grad", "gelu_erf": "gelu_erf_grad", "silu": "silu_grad", "exp": "exp",
               "softplus": "sigmoid"}


def _logsumexp(x, axis):
    top = x.max(axis=axis, keepdims=True)
    return (top + np.log(np.exp(x - top).sum(axis=axis, keepdims=True))).squeeze(axis)


REDUCTIONS = {
    "row_sum": lambda x: x.sum(axis=1),
    "col_sum": lambda x: x.sum(axis=0),
    "row_max": lambda x: x.max(axis=1),
    "col_max": lambda x: x.max(axis=0),
    "row_logsumexp": lambda x: _logsumexp(x, 1),
}


def rope(x, cos, sin):
    """Interleaved RoPE: pair j = columns (2j, 2j+1), rotated by column j % H of cos/sin [M, H]."""
    n = x.shape[1]
    h = cos.shape[1]
    out = np.empty_like(x)
    for j in range(n // 2):
        c, s = cos[:, j % h], sin[:, j % h]
        first, second = x[:, 2 * j], x[:, 2 * j + 1]
        out[:, 2 * j] = first * c - second * s
        out[:, 2 * j + 1] = first * s + second * c
    return out


def unpack(x):
    """(first, second) of every column pair: columns 0, 2, 4, ... and 1, 3, 5, ..."""
    n = x.shape[1]
    return x[:, [2 * j for j in range(n // 2)]], x[:, [2 * j + 1 for j in range(n // 2)]]


# Philox2x32-10, on Python integers ---------------------------------------------------------------
M32 = 0xFFFFFFFF


def philox2x32_10(c0: int, c1: int, key: int) -> tuple[int, int]:
    """Random123's philox2x32 with 10 rounds: counter (c0, c1), one 32-bit key word."""
    for _ in range(10):
        product = 0xD256D193 * c0
        hi, lo = product >> 32, product & M32
        c0, c1 = (hi ^ c1 ^ key) & M32, lo
        key = (key + 0x9E3779B9) & M32
    return c0, c1


def philox_uniform(seed: int, row: int, col: int) -> float:
    """CODA's dropout number for one element. One Philox call on counter (col // 2,
    8 * (row // 16) + row % 8) under key seed gives two words = four 16-bit numbers, for rows r
    (first word) and r + 8 (second word) of a 16-row group and columns 2j (low half of a word)
    and 2j + 1 (high half); the element's number is those bits * 2**-16."""
    first, second = philox2x32_10((col >> 1) & M32, (8 * (row >> 4) + row % 8) & M32, seed & M32)
    word = first if row % 16 < 8 else second
    bits = word & 0xFFFF if col % 2 == 0 else word >> 16
    return bits * 2.0**-16


# helpers -----------------------------------------------------------------------------------------
def np64(t) -> np.ndarray:
    """A tensor (or number) as a float64 NumPy array."""
    if isinstance(t, torch.Tensor):
        return t.detach().to(torch.float64).cpu().numpy()
    return np.asarray(t, dtype=np.float64)


def assert_close64(got: torch.Tensor, want, rtol: float = 1e-12, atol: float | None = None):
    """Compare a CODA result with a float64 formula: relative 1e-12 (absolute 1e-12 of the scale)."""
    want = np.asarray(want, dtype=np.float64)
    got_np = np64(got)
    assert got_np.shape == want.shape, (got_np.shape, want.shape)
    if atol is None:
        atol = rtol * max(1.0, float(np.nanmax(np.abs(want))) if want.size else 1.0)
    np.testing.assert_allclose(got_np, want, rtol=rtol, atol=atol)


def dropout_mask_from_rng(seed: int, p: float, m: int, n: int) -> np.ndarray:
    """The keep mask the contract describes, from `coda.runtime.rng.uniform` (float32 compare)."""
    from coda.runtime import rng

    u = rng.uniform(seed, torch.arange(m)[:, None], torch.arange(n)[None, :])
    return (u >= torch.tensor(p, dtype=torch.float32)).numpy()


def launch_inputs(m: int, n: int, k: int, *, seed: int, dtype=torch.float64, domain: str = "any"):
    """A and B for a launch, so that A @ B lies in `domain` (see ELEMENTWISE)."""
    g = torch.Generator().manual_seed(seed)
    if domain == "int":
        a = torch.randint(-2, 3, (m, k), generator=g).to(dtype)
        b = torch.randint(-2, 3, (k, n), generator=g).to(dtype)
    elif domain in ("pos", "nonzero"):
        a = (torch.rand(m, k, generator=g, dtype=torch.float64) + 0.2).to(dtype)
        b = (torch.rand(k, n, generator=g, dtype=torch.float64) + 0.2).to(dtype)
        if domain == "nonzero":
            a = a * (torch.randint(0, 2, (m, 1), generator=g) * 2 - 1).to(dtype)
    elif domain == "mask":
        a = torch.randint(-1, 2, (m, k), generator=g).to(dtype)
        b = torch.randint(0, 2, (k, n), generator=g).to(dtype)
    else:
        scale = 1.5 / math.sqrt(k)
        a = (torch.randn(m, k, generator=g, dtype=torch.float64) * scale).to(dtype)
        b = torch.randn(k, n, generator=g, dtype=torch.float64).to(dtype)
    return a, b


def random_values(shape, domain: str, g: torch.Generator, dtype=torch.float64) -> torch.Tensor:
    """Operand values in `domain`."""
    if domain == "int":
        x = torch.randint(-3, 4, shape, generator=g).to(torch.float64)
    elif domain == "pos":
        x = torch.rand(shape, generator=g, dtype=torch.float64) * 3 + 0.1
    elif domain == "nonzero":
        sign = torch.randint(0, 2, shape, generator=g) * 2 - 1
        x = (torch.rand(shape, generator=g, dtype=torch.float64) * 3 + 0.1) * sign
    elif domain == "mask":
        x = torch.randint(-1, 2, shape, generator=g).to(torch.float64)
    else:
        x = torch.randn(shape, generator=g, dtype=torch.float64) * 1.5
    return x.to(dtype)


def dsl_error(source: str):
    """Compile `source`, which must fail with a DslError; return the error."""
    try:
        coda.compile(source)
    except coda.DslError as err:
        return err
    raise AssertionError(f"no DslError for {source!r}")


def assert_located(err: coda.DslError, line: int, col: int, *fragments: str) -> None:
    """`err` names `line`/`col`, shows the source line with a caret under the column, and says
    each of `fragments`."""
    text = str(err)
    assert f"line {line}, column {col}" in text, text
    lines = text.splitlines()
    assert err.source is not None and lines[-2] == "    " + err.source.splitlines()[line - 1], text
    under = lines[-2][4:4 + col - 1]     # the caret's indent keeps the line's tabs, so it aligns
    assert lines[-1] == "    " + "".join("\t" if c == "\t" else " " for c in under) + "^", text
    for fragment in fragments:
        assert fragment in text, (fragment, text)


def randomize(module: torch.nn.Module, scale: float, vector_offset: float, seed: int = 0):
    """`module` in float64 with random parameters: N(0, scale²), plus `vector_offset` for the 1-D
    ones (norm gains away from 0 and 1, so the norms are not trivial). Returns the module."""
    gen = torch.Generator().manual_seed(seed)
    module.double()
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64) * scale
                    + (p.dim() == 1) * vector_offset)
    return module


def call(name: str, *args) -> tuple:
    """A fuzzers' expression tree node: primitive `name` applied to `args`."""
    return ("call", name, tuple(args))


def names_in(tree, found: set | None = None) -> set:
    """The variable names a fuzzers' expression tree reads."""
    found = set() if found is None else found
    if tree[0] == "var":
        found.add(tree[1])
    elif tree[0] == "call":
        for arg in tree[2]:
            names_in(arg, found)
    return found


def without_unread_lets(statements: list) -> list:
    """The fuzzers' statements (kind, name, tree, ...) less each "let" that no later statement
    reads (the DSL refuses an unread local); dropping one may leave another unread."""
    while True:
        read = [names_in(s[2]) for s in statements]
        dead = [i for i, s in enumerate(statements)
                if s[0] == "let" and not any(s[1] in r for r in read[i + 1:])]
        if not dead:
            return statements
        statements = [s for i, s in enumerate(statements) if i not in dead]


def guarded(name: str, args) -> tuple:
    """`name` applied to `args` kept in its safe domain: log/sqrt/rsqrt(abs(x) + 1),
    exp(min(x, 5)), a / (abs(b) + 1). The guards are part of the tree, so every evaluation
    sees them."""
    if name in ("log", "sqrt", "rsqrt"):
        return call(name, call("add", call("abs", args[0]), ("const", 1.0)))
    if name == "exp":
        return call("exp", call("min", args[0], ("const", 5.0)))
    if name == "div":
        return call("div", args[0], call("add", call("abs", args[1]), ("const", 1.0)))
    return call(name, *args)


def dsl_text(tree) -> str:
    """The DSL text of a fuzzers' expression tree: ("var", name), ("const", value) or
    ("call", primitive, args)."""
    if tree[0] == "var":
        return tree[1]
    if tree[0] == "const":
        return f"({tree[1]!r})" if tree[1] < 0 else repr(tree[1])
    _, name, args = tree
    parts = [dsl_text(a) for a in args]
    if name in INFIX.values():
        infix = next(k for k, v in INFIX.items() if v == name)
        return f"({parts[0]} {infix} {parts[1]})"
    if name == "neg":
        return f"(-{parts[0]})"
    return f"{name}({', '.join(parts)})"
