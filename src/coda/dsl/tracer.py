"""Python function -> IR. `@coda.epilogue` calls the function once on symbolic values.

The functions users call inside (`coda.gelu`, `coda.row_sum`, `coda.unpack`, ...) are made here
from the primitive table, so the tracer and the text DSL build the very same nodes.
"""

from __future__ import annotations

import inspect
import itertools
import linecache
import numbers
import os
import sys
import traceback
from collections.abc import Callable

from ..errors import DslError, Loc
from ..ir import Epilogue, Node, Output, Param, as_float, toposort
from ..primitives import INFIX, KINDS, PRIMITIVES
from .lower import check_name


class Value:
    """A symbolic tile value inside a traced epilogue function."""

    __slots__ = ("node",)
    __hash__ = None  # `==` builds a comparison, so values cannot be dictionary keys

    def __init__(self, node: Node):
        self.node = node

    def __bool__(self):
        raise DslError("an epilogue value has no truth value: use coda.where(cond, a, b) "
                       "instead of `if` or `and`/`or`, and coda.max / coda.min instead of "
                       "Python's max / min")

    def __neg__(self):
        return _apply("neg", self)

    def __abs__(self):
        return _apply("abs", self)

    def __getattr__(self, name: str):
        if name.startswith("__"):   # Python's protocols (copy, pickle) look for these
            raise AttributeError(name)
        raise DslError(f"an epilogue value has no attribute {name!r}: {_method_hint(name)}")

    def __pow__(self, _):
        raise DslError("an epilogue has no power operator: write x * x or coda.square(x); "
                       "coda.exp(y * coda.log(x)) for x > 0")

    __rpow__ = __pow__   # `2 ** x` too

    def __pos__(self):
        return self

    def __repr__(self) -> str:
        return f"<coda value {self.node.op}>"


#: tensor methods an author may reach for, by what an epilogue does instead
_REDUCING = ("sum", "mean", "max", "min", "amax", "amin", "logsumexp", "softmax", "norm")
_CASTING = ("float", "to", "type", "half", "bfloat16", "double")
_RESHAPING = ("T", "t", "transpose", "view", "reshape", "permute", "shape", "size", "unsqueeze",
              "squeeze", "expand", "flatten")


def _method_hint(name: str) -> str:
    """What to write for `value.name` (a torch tensor's method, mostly)."""
    if name in _REDUCING:   # before the primitives: x.max() is a reduction, coda.max(a, b) is not
        return ("reductions are outputs: coda.row_sum(x), coda.col_sum(x), coda.row_max(x), "
                "coda.col_max(x) or coda.row_logsumexp(x), returned in the result dict")
    if name in PRIMITIVES:
        return f"write coda.{name}(x), not x.{name}()"
    if name in _CASTING:
        return ("values are float32 already; an output's stored dtype is chosen at launch "
                "(out_dtype=, dtypes=)")
    if name in _RESHAPING:
        return "an epilogue computes element by element on the output tile: values have no shape"
    return "use coda's functions on values (coda.exp(x), coda.where(c, a, b), coda.row_sum(x), ...)"


def _binary(name: str, reflected: bool = False):
    if reflected:
        return lambda self, other: _apply(name, other, self)
    return lambda self, other: _apply(name, self, other)


for _op, _name in INFIX.items():
    _dunder = {"+": "add", "-": "sub", "*": "mul", "/": "truediv", "<": "lt", "<=": "le",
               ">": "gt", ">=": "ge", "==": "eq", "!=": "ne"}[_op]
    setattr(Value, f"__{_dunder}__", _binary(_name))
    if _op in "+-*/":
        setattr(Value, f"__r{_dunder}__", _binary(_name, reflected=True))


class Reduced:
    """The result of `coda.row_sum(...)` and friends: an output, not a value to compute with."""

    def __init__(self, reduction: str, node: Node, loc: Loc | None = None):
        self.reduction = reduction
        self.node = node
        self.loc = loc

    def _refuse(self, *_):
        raise DslError(f"{self.reduction}(...) is an output, complete only when the kernel ends: "
                       f"return it in the result dict instead of computing with it")

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _refuse
    __truediv__ = __rtruediv__ = __neg__ = __pos__ = __bool__ = __abs__ = _refuse
    __pow__ = __rpow__ = __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = _refuse
    __lt__ = __le__ = __gt__ = __ge__ = __eq__ = __ne__ = _refuse
    __hash__ = None


def _node(x, where: str) -> Node:
    if isinstance(x, Value):
        return x.node
    if isinstance(x, numbers.Real) and not isinstance(x, bool):
        return Node("const", (), as_float(x))
    if isinstance(x, Reduced):
        x._refuse()
    hint = ""
    if isinstance(x, tuple) and len(x) == 2 and all(isinstance(v, Value) for v in x):
        hint = " (coda.unpack gives two values: `gate, up = coda.unpack(x)`)"
    raise DslError(f"{where}: expected an epilogue value or a number, got {type(x).__name__}{hint}")


def _caller_loc() -> Loc | None:
    """Where the user's code builds a value: the innermost frame outside this module (its file,
    line and, from Python 3.11, column). Errors that the passes find later in the IR (mixed
    column domains, a dropout probability that is no scalar) then point at that expression, as
    they do in DSL text."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename == __file__:
        frame = frame.f_back
    if frame is None:
        return None
    line, col = frame.f_lineno, None
    positions = getattr(frame.f_code, "co_positions", None)   # Python >= 3.11
    if positions is not None and frame.f_lasti >= 0:   # the running instruction's (as tracebacks)
        start, _, col, _ = next(itertools.islice(positions(), frame.f_lasti // 2, None), (None,) * 4)
        line = start or line
    return Loc(line, (col or 0) + 1, frame.f_code.co_filename)


def _check_arity(name: str, args: tuple, keywords: dict | None = None) -> None:
    """The text DSL's arity rule; arguments go by position there and here (a keyword, as in
    `coda.dropout(h, p=0.1)`, would otherwise be Python's TypeError about an inner function)."""
    arity = PRIMITIVES[name].arity
    if keywords:
        doc = PRIMITIVES[name].doc
        call = doc.split(":")[0] if doc.startswith(f"{name}(") else f"{name}(...)"
        raise DslError(f"coda.{name} takes its arguments by position, as in coda.{call}, not by "
                       f"keyword ({', '.join(f'{k}=' for k in keywords)})")
    if len(args) != arity:
        plural = "s" if arity != 1 else ""
        raise DslError(f"{name} takes {arity} argument{plural}, got {len(args)}")


def _apply(name: str, *args) -> Value:
    prim = PRIMITIVES[name]
    _check_arity(name, args)
    nodes = tuple(_node(a, name) for a in args)
    if prim.form == "rope" and any(n.op != "operand" for n in nodes[1:]):
        raise DslError("rope's cos and sin must be operands (kind `head`)")
    return Value(Node(name, nodes, None, _caller_loc()))


def _make_function(name: str) -> Callable:
    prim = PRIMITIVES[name]
    if prim.form == "reduction":
        def fn(*args, **keywords):
            _check_arity(name, args, keywords)
            return Reduced(name, _node(args[0], name), _caller_loc())
    elif prim.form == "unpack":
        def fn(*args, **keywords):
            _check_arity(name, args, keywords)
            pair, loc = _node(args[0], name), _caller_loc()
            return Value(Node("unpack", (pair,), 0, loc)), Value(Node("unpack", (pair,), 1, loc))
    else:
        def fn(*args, **keywords):
            _check_arity(name, args, keywords)
            return _apply(name, *args)
    fn.__name__ = name
    fn.__doc__ = prim.doc or f"The epilogue primitive `{name}`."
    return fn


#: The functions `coda` exports for use inside `@coda.epilogue` (`coda.gelu`, `coda.row_sum`, ...).
FUNCTIONS: dict[str, Callable] = {name: _make_function(name) for name in PRIMITIVES}


def trace(fn: Callable) -> Epilogue:
    """Call `fn(acc, *operands)` on symbolic values and collect the outputs it returns.

    The first parameter is the GEMM result. A parameter named `output` is the prior contents of
    `out=` (for accumulation: `return output + acc`). Every other parameter is an operand; its
    kind comes from its annotation (`bias: coda.col` or `"col"`) or is inferred at launch, and a
    numeric default makes it a scalar with that default.
    """
    if not callable(fn):
        raise DslError(f"coda.epilogue takes a function, got {type(fn).__name__}")
    name = getattr(fn, "__name__", type(fn).__name__)
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError) as e:   # a builtin without a Python signature
        raise DslError(f"coda.epilogue: cannot read the parameters of {name}: {e}") from None
    names = list(signature.parameters)
    if not names:
        raise DslError(f"{name}: an epilogue function takes the GEMM result as its first parameter")
    try:
        params = _operands(fn, name, list(signature.parameters.values())[1:])
    except DslError as e:   # a parameter's fault: point at the function's definition
        raise e.located(*_user_line(fn, None)) from None
    symbols = {n: Value(Node("prior" if n == "output" else "operand", (), None if n == "output" else n))
               for n in names[1:]}
    try:
        result = fn(Value(Node("input")), **symbols)
    except DslError as e:
        if e.loc is not None:
            raise
        raise e.located(*_user_line(fn, e.__traceback__)) from None
    except TypeError as e:   # most often a symbolic value handed to torch or math
        raise DslError(f"{name}: {e}. An epilogue's values are symbolic: use coda's functions on "
                       f"them (coda.exp, coda.gelu, coda.where, ...), not torch's or math's",
                       *_user_line(fn, e.__traceback__)) from None
    try:
        outputs = _collect_outputs(name, result)
    except DslError as e:   # what the function returned: point at its definition
        if e.loc is not None:
            raise
        raise e.located(*_user_line(fn, None)) from None
    _check_own_values(fn, name, names, outputs)
    return Epilogue(name, params, outputs)


def _check_own_values(fn: Callable, name: str, names: list[str], outputs) -> None:
    """The outputs are built from this function's parameters only: a value kept from another
    traced function (a global, a closure's dict) reads operands this one does not have."""
    for node in toposort(o.value for o in outputs):
        if node.op == "operand" and node.arg not in names[1:]:
            what = f"operand {node.arg!r}"
        elif node.op == "prior" and "output" not in names[1:]:
            what = "the prior output (`output`)"
        else:
            continue
        raise DslError(f"{name}: the result reads {what}, which is not a parameter of this "
                       f"function: a value kept from another traced epilogue? Build every value "
                       f"from this function's own parameters", *_user_line(fn, None))


def _operands(fn: Callable, name: str, parameters: list[inspect.Parameter]) -> dict[str, Param]:
    """The epilogue's operands from the function's parameters after the GEMM result's (`output`,
    the prior contents of `out=`, is none): a kind from the annotation, a numeric default makes
    a scalar; the text DSL's reserved names refused."""
    params: dict[str, Param] = {}
    definition = _user_line(fn, None)[0]   # where a later check of an operand points
    for p in parameters:
        if p.kind == p.POSITIONAL_ONLY:
            raise DslError(f"{name}: parameter {p.name!r} is positional-only (before `/`), but operands "
                           f"(and `output`) are bound by name: remove the `/` or move it after the "
                           f"first parameter")
        if p.name == "output":
            continue
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise DslError(f"{name}: *args and **kwargs cannot be epilogue operands")
        check_name(p.name, None, "an operand")
        kind = None if p.annotation is p.empty else _annotation_kind(fn, p.annotation)
        if kind is not None and kind not in KINDS:
            hint = ""
            if isinstance(kind, str) and kind.rpartition(".")[2] in KINDS:
                hint = (f" (a postponed annotation is text, looked up in the function's module and "
                        f"in the variables it uses: write the kind as a string: "
                        f"{kind.rpartition('.')[2]!r})")
            raise DslError(f"{name}: parameter {p.name!r} has kind {kind!r}; expected one "
                           f"of {', '.join(KINDS)}{hint}")
        default = None
        if p.default is not p.empty:
            if not isinstance(p.default, numbers.Real) or isinstance(p.default, bool):
                raise DslError(f"{name}: parameter {p.name!r} has a default that is not "
                               f"a number")
            default, kind = as_float(p.default), kind or "scalar"
        params[p.name] = Param(p.name, kind, definition, default)
    return params


def locate(err: DslError, fn: Callable) -> DslError:
    """`err`, raised while checking the IR traced from `fn`, quoting the user's source: at the
    expression that built the offending value where the tracer recorded one, else at the
    function's first line (an output's name, say)."""
    if err.loc is None:
        return err.located(*_user_line(fn, None))
    if err.source is None and err.loc.file:
        return err.located(err.loc, "".join(linecache.getlines(err.loc.file)) or None)
    return err


def _user_line(fn: Callable, tb) -> tuple[Loc | None, str | None]:
    """Where in the user's Python source a traced function went wrong (file, line, column), with
    that file's text to quote the line: the innermost frame of traceback `tb` in the function's
    own file, else outside coda; without one, the function's first line."""
    code = getattr(fn, "__code__", None)
    own_file = code.co_filename if code else None
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
    frames = [f for f in traceback.extract_tb(tb) if not os.path.abspath(f.filename).startswith(package)]
    frame = next((f for f in reversed(frames) if f.filename == own_file), frames[-1] if frames else None)
    if frame is not None:
        file, line, col = frame.filename, frame.lineno, (getattr(frame, "colno", None) or 0) + 1
    elif code is not None:
        file, line, col = own_file, code.co_firstlineno, 1
    else:
        return None, None
    return Loc(line, col, file), "".join(linecache.getlines(file)) or None


def _annotation_kind(fn: Callable, annotation):
    """The kind an annotation names. Under `from __future__ import annotations` the annotation
    `coda.col` arrives as the string "coda.col" (and `"col"` as "'col'"): evaluate it in the
    function's globals and the enclosing function's variables it uses (`coda` imported inside
    the function that defines it)."""
    names = dict(getattr(fn, "__globals__", {}))
    try:
        names.update(inspect.getclosurevars(fn).nonlocals)
    except (TypeError, ValueError):   # not a Python function
        pass
    for _ in range(2):
        if not isinstance(annotation, str) or annotation in KINDS:
            break
        try:
            value = eval(annotation, names)
        except Exception:
            break
        if not isinstance(value, str):
            break
        annotation = value
    return annotation


def _collect_outputs(name: str, result) -> tuple[Output, ...]:
    if isinstance(result, (tuple, list)):
        raise DslError(f"{name}: the function returned a {type(result).__name__}; return the output "
                       f"alone, or a dict of outputs: {{'output': ..., 'h': ...}}")
    if not isinstance(result, dict):
        result = {"output": result}
    if "output" not in result:
        hint = ""
        if result and all(isinstance(v, Reduced) for v in result.values()):
            hint = (f" (to compute only reductions, return 'output': acc too and launch with "
                    f"outputs={list(result)!r}: the tile is then never stored)")
        raise DslError(f"{name}: the returned dict has no 'output' entry{hint}")
    outputs = []
    for key in ["output", *(k for k in result if k != "output")]:
        value = result[key]
        if not isinstance(key, str) or not key.isidentifier():
            raise DslError(f"{name}: output names must be identifiers, got {key!r}")
        if isinstance(value, Reduced):
            if key == "output":
                raise DslError(f"{name}: 'output' must be a tile, not a {value.reduction}")
            outputs.append(Output(key, value.node, value.reduction, value.loc))
        else:
            outputs.append(Output(key, _node(value, f"output {key!r}")))
    return tuple(outputs)
