"""Which column domain each value lives in: the full [M, N] tile, the [M, N/2] pair domain, or
the [M, 2N] domain of interleaved pairs.

`unpack` moves from the full domain to the pair domain; everything computed from its results
lives there too. `pack` moves the other way: from the pair domain back to the full one, or from
the full domain to [M, 2N], whose values can only be stored (no further arithmetic, no
reduction: the tile the epilogue holds has N columns). Operands, constants and the prior output
adapt to the domain of the values they meet. A value that meets both the full and the pair
domain must not depend on columns (a constant, a scalar or a row operand): `Widths.operands`
lists every domain an operand meets, and binding checks its kind.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import DslError
from ..ir import Epilogue, Node

FULL, HALF, DOUBLE = "full", "half", "double"
#: The domain `pack` gives, from that of its arguments.
PACKED = {HALF: FULL, FULL: DOUBLE}
#: The domain `pack`'s arguments are in, from the domain it gives.
UNPACKED = {packed: w for w, packed in PACKED.items()}
#: The values that depend on their column but on no `input`, so they take the domain they meet:
#: what a second domain would change (one node cannot be computed in both).
COLUMN_DEPENDENT = {"col_index": "which number columns differently",
                    "dropout": "whose masks differ (drawn per column of the domain)",
                    "rope": "whose column pairs differ"}
#: Each domain's columns, as a text and from the GEMM's N.
COLUMNS = {FULL: "N", HALF: "N/2", DOUBLE: "2N"}


def columns(width: str, n: int) -> int:
    """The number of columns of a `width` value when the GEMM's output has n."""
    return {FULL: n, HALF: n // 2, DOUBLE: 2 * n}[width]


@dataclass(frozen=True)
class Widths:
    nodes: dict[Node, str]                # each node's domain (the narrower-named one if both)
    outputs: dict[str, str]               # each output's domain (a reduction's: the one it reduces)
    operands: dict[str, frozenset[str]]   # the domains each operand is broadcast into


def widths(epi: Epilogue) -> Widths:
    """Assign domains; raise DslError where a computed value would mix the two."""
    order = epi.nodes()
    own: dict[Node, str | None] = {}
    for node in order:
        if node.op == "input":
            own[node] = FULL
        elif node.op == "unpack":
            if own[node.args[0]] == HALF:
                raise DslError("unpack needs an [M, N] value; this one is already unpacked",
                               node.loc)
            own[node] = HALF
        elif node.op == "pack":
            found = {own[a] for a in node.args} - {None}
            if DOUBLE in found:
                raise DslError("pack needs [M, N] or [M, N/2] values; this one is already packed "
                               "to [M, 2N]", node.loc)
            if len(found) > 1:
                raise DslError("pack's arguments mix an [M, N] value with an [M, N/2] value from "
                               "unpack", node.loc)
            own[node] = PACKED[found.pop() if found else FULL]
        else:
            found = {own[a] for a in node.args} - {None}
            if DOUBLE in found:
                raise DslError(f"`{node.op}` of a pack(...) to [M, 2N]: such a value can only be "
                               f"stored as an output", node.loc)
            if len(found) > 1:
                raise DslError(f"`{node.op}` mixes an [M, N] value with an [M, N/2] value from "
                               f"unpack", node.loc)
            own[node] = found.pop() if found else None
    # Push domains down to adaptive nodes: operands, constants, prior, and what only they feed.
    context: dict[Node, set[str]] = {}
    for out in epi.outputs:
        context.setdefault(out.value, set()).add(own[out.value] or FULL)
    for node in reversed(order):
        mine = {own[node]} if own[node] else context.get(node, {FULL})
        for arg in node.args:
            if own[arg] is None:
                given = {FULL} if node.op == "unpack" else mine
                if node.op == "pack":   # the domain packed from
                    given = {w for w, packed in PACKED.items() if packed in mine}
                context.setdefault(arg, set()).update(given)
    final = {n: ({own[n]} if own[n] else context.get(n, {FULL})) for n in order}
    for node in order:   # computed once, in one domain, while its values depend on the column
        if node.op in COLUMN_DEPENDENT and len(final[node]) > 1:
            raise DslError(f"{node.op}() is used in both the [M, N] and the [M, N/2] column domain, "
                           f"{COLUMN_DEPENDENT[node.op]}; use it in one of them", node.loc)
    outputs = {o.name: min(final[o.value]) for o in epi.outputs}
    for o in epi.outputs:
        if o.reduction is not None and outputs[o.name] == DOUBLE:
            raise DslError(f"{o.reduction} of a pack(...) to [M, 2N]: such a value can only be "
                           f"stored as a tile output (for sums over the pairs' columns, launch on an "
                           f"[M, 2N] input and unpack it: a tile operand read there is [M, N], pack(...) "
                           f"is then [M, 2N] like the input, and its sums are the interleaved ones)", o.loc)
    for node in order:
        if node.op == "prior" and final[node] != {outputs["output"]}:
            raise DslError("the prior `output` is used in another column domain than the new "
                           "one", node.loc)
    operands = {n.arg: frozenset(final[n]) for n in order if n.op == "operand"}
    for name, found in operands.items():
        param = epi.params[name]
        if param.kind in ("col", "tile") and len(found) > 1:
            met = " and ".join(f"[M, {COLUMNS[w]}]" for w in COLUMNS if w in found)
            raise DslError(f"operand {name!r} is declared `{param.kind}` but meets two column domains "
                           f"({met}), whose columns differ; give each domain an operand of its own",
                           param.loc)
    return Widths({n: min(w) for n, w in final.items()}, outputs, operands)
