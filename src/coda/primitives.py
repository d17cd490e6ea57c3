"""The one table of epilogue primitives.

Every function an epilogue can call is one `Primitive` row here. The parser and the tracer look up
names and arities, the checker reads `form`, the reference backend calls `ref`, the Triton code
generator formats `triton`, and `coda.ops` reads `grad` to build backward programs. Nothing else in
the package keeps a list of operations.

`triton` is a format string over the generated names of the arguments (`{0}`, `{1}`, ...); the
generated kernel imports `coda.codegen.tl_math` as `cm` for functions longer than an expression.
All arithmetic is float32 (float64 in the reference when asked); comparisons give 1.0 or 0.0.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class Primitive:
    """One epilogue function.

    form: "elementwise" (pure function of equally-broadcast arguments), "dropout" (needs the seed
    and element coordinates), "index" (an element's row or column), "rope" (rotates neighbouring
    column pairs), "unpack" (splits a tile into its column pairs), "pack" (interleaves two tiles'
    columns), or "reduction" (row/column
    reduction; only as an output).
    """

    name: str
    arity: int
    form: str
    ref: Callable[..., torch.Tensor] | None
    triton: str
    grad: str | None = None
    infix: str | None = None
    doc: str = ""


_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_GELU_CUBIC = 0.044715


def _gelu_grad(x: torch.Tensor) -> torch.Tensor:
    inner = _SQRT_2_OVER_PI * (x + _GELU_CUBIC * x**3)
    t = torch.tanh(inner)
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * _SQRT_2_OVER_PI * (1 + 3 * _GELU_CUBIC * x * x)


def _gelu_erf_grad(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * (1 + torch.erf(x / math.sqrt(2.0))) + x * torch.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)


def _silu_grad(x: torch.Tensor) -> torch.Tensor:
    s = torch.sigmoid(x)
    return s * (1 + x * (1 - s))


def _sigmoid_grad(x: torch.Tensor) -> torch.Tensor:
    s = torch.sigmoid(x)
    return s * (1 - s)


#: min's and max's NaN rule in Triton
_NAN = "propagate_nan=tl.PropagateNan.ALL"


def _as_float(cond: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return cond.to(like.dtype)


def _rows(*prims: Primitive) -> dict[str, Primitive]:
    return {p.name: p for p in prims}


def _e(name, arity, ref, triton, grad=None, infix=None, doc=""):
    return Primitive(name, arity, "elementwise", ref, triton, grad, infix, doc)


def _reduction(name: str, doc: str) -> Primitive:
    return Primitive(name, 1, "reduction", None, "", doc=doc)


PRIMITIVES: dict[str, Primitive] = _rows(
    # arithmetic (the DSL's operators map to these)
    _e("add", 2, torch.add, "({0} + {1})", infix="+"),
    _e("sub", 2, torch.sub, "({0} - {1})", infix="-"),
    _e("mul", 2, torch.mul, "({0} * {1})", infix="*"),
    _e("div", 2, torch.div, "({0} / {1})", infix="/"),
    _e("neg", 1, torch.neg, "({0} * -1.0)"),   # Triton's unary minus is 0 - x: -(+0) would be +0
    # comparisons: 1.0 where true, 0.0 where false
    _e("lt", 2, lambda a, b: _as_float(a < b, a), "({0} < {1}).to(tl.float32)", infix="<"),
    _e("le", 2, lambda a, b: _as_float(a <= b, a), "({0} <= {1}).to(tl.float32)", infix="<="),
    _e("gt", 2, lambda a, b: _as_float(a > b, a), "({0} > {1}).to(tl.float32)", infix=">"),
    _e("ge", 2, lambda a, b: _as_float(a >= b, a), "({0} >= {1}).to(tl.float32)", infix=">="),
    _e("eq", 2, lambda a, b: _as_float(a == b, a), "({0} == {1}).to(tl.float32)", infix="=="),
    _e("ne", 2, lambda a, b: _as_float(a != b, a), "({0} != {1}).to(tl.float32)", infix="!="),
    _e("where", 3, lambda c, a, b: torch.where(c != 0, a, b), "tl.where({0} != 0, {1}, {2})",
       doc="where(c, a, b): a where c is non-zero, else b"),
    # a NaN argument gives NaN, as torch's (the GPU's plain min and max return the other one)
    _e("min", 2, torch.minimum, f"tl.minimum({{0}}, {{1}}, {_NAN})"),
    _e("max", 2, torch.maximum, f"tl.maximum({{0}}, {{1}}, {_NAN})"),
    _e("clamp", 3, lambda x, lo, hi: torch.minimum(torch.maximum(x, lo), hi),
       f"tl.minimum(tl.maximum({{0}}, {{1}}, {_NAN}), {{2}}, {_NAN})",
       doc="clamp(x, lo, hi): min(max(x, lo), hi)"),
    # unary math
    _e("abs", 1, torch.abs, "tl.abs({0})"),
    _e("exp", 1, torch.exp, "cm.exp({0})", grad="exp"),
    _e("log", 1, torch.log, "tl.log({0})"),
    _e("sqrt", 1, torch.sqrt, "tl.sqrt({0})"),
    _e("rsqrt", 1, torch.rsqrt, "tl.rsqrt({0})"),
    _e("square", 1, torch.square, "({0} * {0})"),
    _e("erf", 1, torch.erf, "tl.erf({0})", doc="the error function"),
    # rounding: the value a result stored in that dtype holds (the arithmetic stays float32)
    _e("round_bf16", 1, lambda x: x.to(torch.bfloat16).to(x.dtype), "cm.round_bf16({0})",
       doc="round_bf16(x): x rounded to the nearest bfloat16"),
    _e("round_fp16", 1, lambda x: x.to(torch.float16).to(x.dtype), "{0}.to(tl.float16).to(tl.float32)",
       doc="round_fp16(x): x rounded to the nearest float16 (beyond its range: inf)"),
    # activations and their derivatives (d act / d x, evaluated at the pre-activation x)
    _e("tanh", 1, torch.tanh, "cm.tanh({0})", grad="tanh_grad"),
    _e("sigmoid", 1, torch.sigmoid, "cm.sigmoid({0})", grad="sigmoid_grad"),
    # as torch's relu: -0.0 and NaN kept (tl.maximum gives +0.0 for -0.0)
    _e("relu", 1, torch.relu, "tl.where({0} < 0, 0.0, {0})", grad="relu_grad"),
    _e("gelu", 1, lambda x: F.gelu(x, approximate="tanh"), "cm.gelu({0})", grad="gelu_grad",
       doc="GELU, tanh approximation"),
    _e("gelu_erf", 1, F.gelu, "cm.gelu_erf({0})", grad="gelu_erf_grad", doc="GELU, exact (erf)"),
    _e("silu", 1, F.silu, "cm.silu({0})", grad="silu_grad"),
    _e("softplus", 1, F.softplus, "cm.softplus({0})", grad="sigmoid", doc="log(1 + exp(x))"),
    _e("tanh_grad", 1, lambda x: 1 - torch.tanh(x) ** 2, "cm.tanh_grad({0})"),
    _e("sigmoid_grad", 1, _sigmoid_grad, "cm.sigmoid_grad({0})"),
    # 1 but where x <= 0, as torch's relu backward (threshold_backward): 1 at NaN
    _e("relu_grad", 1, lambda x: _as_float(~(x <= 0), x), "tl.where({0} <= 0, 0.0, 1.0)"),
    _e("gelu_grad", 1, _gelu_grad, "cm.gelu_grad({0})"),
    _e("gelu_erf_grad", 1, _gelu_erf_grad, "cm.gelu_erf_grad({0})"),
    _e("silu_grad", 1, _silu_grad, "cm.silu_grad({0})"),
    # forms that need more than their arguments
    Primitive("dropout", 2, "dropout", None,
              "cm.dropout({0}, {1}, {keep})",
              doc="dropout(x, p): zero with probability p, scale the rest by 1/(1-p); "
                  "the mask is a counter-based hash of (seed, row, column)"),
    Primitive("rope", 3, "rope", None, "",
              doc="rope(x, cos, sin): rotate each column pair (2j, 2j+1) by the angle of pair "
                  "j mod H, with cos and sin [M, H] operands of kind `head`"),
    Primitive("row_index", 0, "index", None, "{rows}[:, None].to(tl.float32)",
              doc="row_index(): the global row of each element, as a float (exact below 2**24)"),
    Primitive("col_index", 0, "index", None, "{cols}[None, :].to(tl.float32)",
              doc="col_index(): the global column of each element in its domain, as a float "
                  "(exact below 2**24); with a row operand `target`, `col_index() == target` "
                  "picks one column per row"),
    Primitive("unpack", 1, "unpack", None, "",
              doc="gate, up = unpack(x): the first and second column of each pair, [M, N/2] each"),
    Primitive("pack", 2, "pack", None, "",
              doc="pack(a, b): a and b interleaved, a in column 2j and b in 2j + 1 (the inverse of "
                  "unpack): [M, N] from [M, N/2] values, or [M, 2N] from [M, N] ones, which can "
                  "only be stored as an output"),
    _reduction("row_sum", "sum over columns: an [M] output"),
    _reduction("col_sum", "sum over rows: an [N] output"),
    _reduction("row_max", "maximum over columns: an [M] output"),
    _reduction("col_max", "maximum over rows: an [N] output"),
    _reduction("row_logsumexp", "log(sum(exp(x))) over columns: an [M] output"),
)

#: Functions of other languages (numpy, torch, C) an author may reach for, and what to write in an
#: epilogue instead: an unknown function's error names it (where a spelling-based guess would
#: mislead: `sum` is not `sub`).
ALTERNATIVES = {
    "sum": "row_sum(x) (over columns: an [M] output) or col_sum(x) (over rows: an [N] output)",
    "mean": "row_sum(x * inv_n) with a scalar operand inv_n = 1 / N (an [M] output)",
    "row_mean": "row_sum(x * inv_n) with a scalar operand inv_n = 1 / N (an [M] output)",
    "col_mean": "col_sum(x * inv_m) with a scalar operand inv_m = 1 / M (an [N] output)",
    "softmax": "row_logsumexp(x) as an output, then exp(x - lse) in a second program (a map with "
               "the row operand lse): a softmax needs whole rows, one tile holds part of one",
    "log_softmax": "row_logsumexp(x) as an output, then x - lse in a second program (a map with "
                   "the row operand lse)",
    "pow": "x * x or square(x); exp(y * log(x)) for x > 0",
    "power": "x * x or square(x); exp(y * log(x)) for x > 0",
    "clip": "clamp(x, lo, hi)",
    "swish": "silu(x)",
    "relu6": "clamp(x, 0.0, 6.0)",
    "leaky_relu": "where(x > 0.0, x, slope * x)",
    "quick_gelu": "x * sigmoid(1.702 * x)",
    "gelu_tanh": "gelu(x) (the tanh approximation)",
    "gelu_new": "gelu(x) (the tanh approximation)",
    "sqr": "square(x)",
    "ln": "log(x)",
    "reciprocal": "1.0 / x",
    "recip": "1.0 / x",
    "fma": "a * b + c",
    "sign": "where(x > 0.0, 1.0, 0.0) - where(x < 0.0, 1.0, 0.0)",
    "maximum": "max(a, b) (element-wise), or row_max / col_max for a reduction",
    "minimum": "min(a, b)",
    "amax": "row_max(x) or col_max(x)",
    "logsumexp": "row_logsumexp(x)",
}



def unknown_function_hint(name: str) -> str:
    """What to say after "unknown function NAME": the epilogue's way to write a function of
    another language, else the primitive with the closest spelling, else nothing."""
    if name in ALTERNATIVES:
        return f"; write {ALTERNATIVES[name]}"
    close = difflib.get_close_matches(name, PRIMITIVES, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


#: The name `input` is the GEMM result tile; `acc` is its alias.
INPUT_NAMES = ("input", "acc")
#: Operand kinds a header (or a launch) may declare; `head` is the [M, H] table kind of `rope`.
KINDS = ("tile", "row", "col", "scalar", "head")
#: The reduction's axis: "row" reductions give one value per row ([M]), "col" one per column.
REDUCTION_AXIS = {"row_sum": "row", "row_max": "row", "row_logsumexp": "row",
                  "col_sum": "col", "col_max": "col"}
INFIX = {p.infix: p.name for p in PRIMITIVES.values() if p.infix}
