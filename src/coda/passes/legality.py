"""Static checks: what can run inside an epilogue, and the kinds usage alone decides.

- `rope`'s tables are operands of kind `head`, and a `head` operand is nothing else;
  `dropout`'s probability is built from constants and scalar operands only, and a constant
  probability lies in [0, 1].
- No computed value mixes the [M, N] and [M, N/2] column domains (see `widths`).
- No operand is named like a launch option (`seed`, `out`, ...), nor an output `a_col_sums`, and
  no two names derive the same kernel parameter (`x_s0` beside `x`: `KERNEL_NAME_SUFFIXES`).
Reductions that are read back, `output` never assigned and the like are caught while the IR is
built (lowering, tracing), where the source location is at hand.
"""

from __future__ import annotations

import unicodedata
from dataclasses import replace

from ..errors import DslError, Loc
from ..ir import A_COL_SUMS, KERNEL_NAME_SUFFIXES, LAUNCH_OPTIONS, Epilogue, Node, toposort
from ..primitives import PRIMITIVES
from .widths import widths


def check(epi: Epilogue) -> Epilogue:
    """Raise DslError for an illegal program; return it with the kinds usage implies filled in."""
    params = dict(epi.params)
    for name, param in params.items():
        if name in LAUNCH_OPTIONS:
            raise DslError(f"{name!r} is a launch option (`prog(a, b, {name}=...)`), so no operand "
                           f"could be bound under that name: rename the operand", param.loc)
    for out in epi.outputs:
        if out.name == A_COL_SUMS:
            raise DslError(f"{A_COL_SUMS!r} is the output that `a_col_sums=True` adds to a launch: "
                           f"give the program's output another name", out.loc)
    _check_kernel_names("op_", [(name, "operand", param.loc) for name, param in params.items()])
    _check_kernel_names("out_", [(o.name, "output", o.loc) for o in epi.outputs if o.reduction is None])
    _check_kernel_names("red_", [(o.name, "output", o.loc) for o in epi.outputs if o.reduction])

    def require(node: Node, kind: str, why: str) -> None:
        param = params[node.arg]
        if param.kind not in (None, kind):
            raise DslError(f"operand {node.arg!r} is declared `{param.kind}` but {why} needs "
                           f"kind `{kind}`", param.loc or node.loc)
        params[node.arg] = replace(param, kind=kind)

    for node in epi.nodes():
        if node.op == "rope":
            for table in node.args[1:]:
                require(table, "head", "a rope table")
        elif node.op == "dropout":
            for part in toposort([node.args[1]]):
                if part.op == "operand":
                    require(part, "scalar", "a dropout probability")
                elif part.op != "const" and getattr(PRIMITIVES.get(part.op), "form", None) != "elementwise":
                    raise DslError("dropout's probability must be a scalar (a number or a "
                                   "scalar operand, and arithmetic on them)", node.loc)
            p = node.args[1]
            if p.op == "const" and not 0.0 <= p.arg <= 1.0:
                raise DslError(f"dropout probability {p.arg} is outside [0, 1]", p.loc or node.loc)
    for node in epi.nodes():
        for position, arg in enumerate(node.args):
            if arg.op == "operand" and params[arg.arg].kind == "head" and not (
                    node.op == "rope" and position > 0):
                raise DslError(f"operand {arg.arg!r} is a `head` table ([M, H]); it can only be "
                               f"rope's cos or sin argument", node.loc or arg.loc)
    for out in epi.outputs:
        if out.value.op == "operand" and params[out.value.arg].kind == "head":
            raise DslError(f"operand {out.value.arg!r} is a `head` table ([M, H]); it cannot be "
                           f"the output {out.name!r}", out.loc or out.value.loc)
    checked = epi.replace(params=params)
    widths(checked)
    return checked


def _check_kernel_names(prefix: str, names: list[tuple[str, str, Loc | None]]) -> None:
    """Raise DslError where two names would derive one kernel parameter (`op_x_s0` from `x` and
    from `x_s0`), or would be one Python identifier (`ﬁ` and `fi`, equal under NFKC)."""
    derived: dict[str, str] = {}
    for name, what, loc in names:
        for suffix in KERNEL_NAME_SUFFIXES[prefix]:
            identifier = unicodedata.normalize("NFKC", prefix + name + suffix)
            other = derived.setdefault(identifier, name)
            if other != name:
                raise DslError(f"{what} names {other!r} and {name!r} would both name the generated "
                               f"kernel's parameter `{identifier}`: rename one of them", loc)
