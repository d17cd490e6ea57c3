"""Launch-time kind inference: which operand is a tile, a row, a column, a head table or a scalar.

Declared kinds win and are checked against the shape; an undeclared operand's kind comes from its
shape, and a shape that fits two kinds (a vector when M equals N) is an error, never a guess.
"""

from __future__ import annotations

import numbers

import torch

from ..errors import DslError, LaunchError
from ..ir import Epilogue
from ..runtime.partials import Partials
from .widths import Widths, columns


def expected_shape(kind: str, m: int, n: int, width: str) -> str:
    cols = columns(width, n)
    return {"tile": f"[{m}, {cols}]", "row": f"[{m}]", "col": f"[{cols}]",
            "head": f"[{m}, H]", "scalar": "a number or 0-d tensor"}[kind]


def infer_kinds(epi: Epilogue, domains: Widths, m: int, n: int, values: dict) -> dict[str, str]:
    """The kind of every operand bound in `values` (name -> tensor or number)."""
    kinds: dict[str, str] = {}
    for name, param in epi.params.items():
        value = values[name]
        seen = domains.operands.get(name, frozenset({"full"}))
        width = min(seen)
        kind = param.kind or _kind_from_shape(name, value, m, n, width)
        if isinstance(value, Partials) and kind not in ("row", "col"):
            raise LaunchError(f"operand {name!r} (kind {kind}): a Partials is a row or column "
                              f"operand's sums, not a {kind}")
        if kind != "scalar" and not isinstance(value, (torch.Tensor, Partials)):
            raise LaunchError(f"operand {name!r}: expected a tensor of shape "
                              f"{expected_shape(kind, m, n, width)} (kind {kind}), got "
                              f"{type(value).__name__}")
        if kind in ("tile", "col", "head") and len(seen) > 1:
            raise DslError(f"operand {name!r} of kind {kind} is used with both [M, N] values and "
                           f"[M, N/2] values from unpack", param.loc, epi.source)
        if not _fits(kind, value, m, n, width):
            got = _describe(value)
            expected = expected_shape(kind, m, n, width)
            expected = expected if kind == "scalar" else f"shape {expected}"
            hint = (" (a one-element tensor: pass t.reshape(()) or t[0])"
                    if kind == "scalar" and isinstance(value, torch.Tensor) and value.numel() == 1 else "")
            raise LaunchError(f"operand {name!r} (kind {kind}): expected {expected}, got {got}{hint}")
        kinds[name] = kind
    return kinds


def _describe(value) -> str:
    if isinstance(value, Partials):
        return f"Partials of shape {list(value.parts.shape)}"
    if isinstance(value, torch.Tensor):
        return f"tensor of shape {list(value.shape)}"
    return type(value).__name__


def _fits(kind: str, value, m: int, n: int, width: str) -> bool:
    if kind == "scalar":
        return (isinstance(value, numbers.Real) and not isinstance(value, bool)) or (
            isinstance(value, torch.Tensor) and value.dim() == 0)
    if isinstance(value, Partials):
        return tuple(value.shape) == {"row": (m,), "col": (columns(width, n),)}.get(kind)
    if not isinstance(value, torch.Tensor):
        return False
    cols = columns(width, n)
    shape = tuple(value.shape)
    return {"tile": shape == (m, cols), "row": shape == (m,), "col": shape == (cols,),
            "head": len(shape) == 2 and shape[0] == m and shape[1] >= 1}[kind]


def _kind_from_shape(name: str, value, m: int, n: int, width: str) -> str:
    fitting = [k for k in ("scalar", "row", "col", "tile") if _fits(k, value, m, n, width)]
    if len(fitting) == 1:
        return fitting[0]
    if not fitting:
        raise LaunchError(f"operand {name!r}: a {_describe(value)} fits no operand kind for an "
                          f"output of {expected_shape('tile', m, n, width)} (tile "
                          f"{expected_shape('tile', m, n, width)}, row [{m}], col "
                          f"{expected_shape('col', m, n, width)}, or a scalar: a number or 0-d "
                          f"tensor)")
    raise LaunchError(f"operand {name!r}: shape {list(value.shape)} fits kinds "
                      f"{' and '.join(fitting)}; declare its kind (`{name}: {fitting[0]}` in an EPILOGUE "
                      f"header, or `{name}: coda.{fitting[0]}` as a Python annotation)")
