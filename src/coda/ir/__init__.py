"""The IR: a typed expression DAG per epilogue, shared by the text DSL and the Python tracer.

A `Node` is one value of the tile being finished: the GEMM result (`input`), an operand, a
constant, the prior contents of the output (`prior`, for `output += ...`), or a primitive applied
to other nodes. Nodes compare and hash structurally (their source location is not part of their
identity), so equal expressions are equal nodes and common-subexpression elimination is a rebuild.

An `Epilogue` names its parameters (operands, with a kind once known) and its outputs: tiles
(`output`, `save`d values) and reductions (`row_sum`, ...), each pointing at the node it stores.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from functools import cached_property

from ..errors import Loc
from ..primitives import REDUCTION_AXIS

LEAF_OPS = ("input", "operand", "const", "prior")
#: The keyword options of a launch (`prog(a, b, seed=..., out=...)`): no operand can be bound
#: under one of these names, so none may have one.
LAUNCH_OPTIONS = ("backend", "out", "out_dtype", "seed", "outputs", "dtypes", "m_limit", "k_limit",
                  "a_col_sums", "unfinished")
#: The output `a_col_sums=True` adds to a launch (its A's column sums): no program output's name.
A_COL_SUMS = "a_col_sums"
#: The names the Triton code generator derives from an operand's name (`op_x_ptr`, ...) and from
#: a tile output's (`out_y_s0`, ...) and a reduction's (`red_s_ptr`, ...), by the suffixes it
#: appends: no two names of a program may derive the same one (passes.legality).
KERNEL_NAME_SUFFIXES = {
    "op_": ("", "_ptr", "_s0", "_s1", "_h", "_sp", "_parts", "_desc", "_smem", "_bufs", "_layout"),
    "out_": ("", "_ptr", "_s0", "_s1", "_desc", "_smem", "_smem_hi", "_bufs", "_layout", "_lo", "_hi"),
    "red_": ("", "_ptr", "_sp", "_max", "_sum"),
}


def as_float(number) -> float:
    """The float a Python number stands for: beyond float64's range, an integer (`10**400`) is
    infinite, as the literal `1e400` is in the DSL's text, not an OverflowError."""
    try:
        return float(number)
    except OverflowError:
        return math.inf if number > 0 else -math.inf


class Node:
    """One value in the epilogue. `op` is a leaf op (LEAF_OPS), a primitive name or "unpack"."""

    __slots__ = ("op", "args", "arg", "loc", "_key", "_hash")

    def __init__(self, op: str, args: tuple[Node, ...] = (), arg: object = None, loc: Loc | None = None):
        self.op = op
        self.args = args
        self.arg = arg
        self.loc = loc
        # a float by its bits: -0.0 is not 0.0 (1/x tells them apart), and a NaN is itself
        self._key = arg.hex() if isinstance(arg, float) else arg
        self._hash = hash((op, args, self._key))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        """Structural equality, walked with a stack: two equal chains of thousands of statements
        built apart (a traced loop run twice) compare without recursing down them."""
        if self is other:
            return True
        if not isinstance(other, Node):
            return False
        pairs, compared = [(self, other)], set()
        while pairs:
            a, b = pairs.pop()
            if a is b or (id(a), id(b)) in compared:
                continue
            if a._hash != b._hash or a.op != b.op or a._key != b._key or len(a.args) != len(b.args):
                return False
            compared.add((id(a), id(b)))
            pairs.extend(zip(a.args, b.args, strict=True))
        return True

    def __repr__(self) -> str:
        return f"Node({self.op!r}, {len(self.args)} args, arg={self.arg!r})"

    def with_args(self, args: tuple[Node, ...]) -> Node:
        """This node with `args`; the same object only when `args` are the very same objects
        (structurally equal but distinct arguments give a new node, so `cse` can share them)."""
        if len(args) == len(self.args) and all(a is b for a, b in zip(args, self.args, strict=True)):
            return self
        return Node(self.op, args, self.arg, self.loc)


@dataclass(frozen=True)
class Param:
    """An operand of the epilogue, bound by keyword at launch. `kind` is None until inferred;
    `declared` is False for a free name of a DSL program without a parameter list."""

    name: str
    kind: str | None = None
    loc: Loc | None = None
    default: float | None = None
    declared: bool = True


@dataclass(frozen=True)
class Output:
    """A value the kernel writes: a tile (`reduction` None) or an [M] / [N] reduction."""

    name: str
    value: Node
    reduction: str | None = None
    loc: Loc | None = None

    @property
    def axis(self) -> str | None:
        """"row" for [M] reductions, "col" for [N] reductions, None for tiles."""
        return REDUCTION_AXIS.get(self.reduction) if self.reduction else None


@dataclass(frozen=True)
class Epilogue:
    """One epilogue program. `outputs[0]` is `output`; `source` is the DSL text, if any."""

    name: str
    params: dict[str, Param]
    outputs: tuple[Output, ...]
    source: str | None = field(default=None, compare=False)

    def replace(self, **changes) -> Epilogue:
        return replace(self, **changes)

    def __reduce__(self):
        """Pickled and copied as a flat list of its nodes, each naming its arguments by their
        places in the list: a node's own pickling recurses down its arguments, which a chain of
        a few hundred statements takes past Python's recursion limit."""
        nodes = self.nodes()
        place = {n: i for i, n in enumerate(nodes)}   # by structure, as nodes() lists them: an
        # argument equal to a listed node but not that object is that node's place
        flat = tuple((n.op, tuple(place[a] for a in n.args), n.arg, n.loc) for n in nodes)
        outputs = tuple(replace(o, value=place[o.value]) for o in self.outputs)
        return _unflatten, (self.name, self.params, flat, outputs, self.source)

    @cached_property
    def _order(self) -> tuple[Node, ...]:
        return tuple(toposort(o.value for o in self.outputs))

    def nodes(self) -> tuple[Node, ...]:
        """Every node reachable from an output, each once, arguments before users (computed
        once: an Epilogue never changes, passes build new ones)."""
        return self._order

    @cached_property
    def accumulates(self) -> bool:
        """True when the program reads the prior output (`output += ...`): it needs `out=`."""
        return any(n.op == "prior" for n in self.nodes())

    @cached_property
    def uses_dropout(self) -> bool:
        return any(n.op == "dropout" for n in self.nodes())


def _unflatten(name: str, params: dict[str, Param], flat: tuple, outputs: tuple[Output, ...],
               source: str | None) -> Epilogue:
    """The Epilogue of `Epilogue.__reduce__`'s flat list."""
    nodes: list[Node] = []
    for op, args, arg, loc in flat:
        nodes.append(Node(op, tuple(nodes[i] for i in args), arg, loc))
    return Epilogue(name, params, tuple(replace(o, value=nodes[o.value]) for o in outputs), source)


def toposort(roots: Iterable[Node]) -> list[Node]:
    """The nodes reachable from `roots`, each once, every node after its arguments."""
    order: list[Node] = []
    seen: set[Node] = set()
    stack = [(r, False) for r in reversed(list(roots))]
    while stack:
        node, expanded = stack.pop()
        if node in seen:
            continue
        if expanded:
            seen.add(node)
            order.append(node)
            continue
        stack.append((node, True))
        stack.extend((a, False) for a in reversed(node.args) if a not in seen)
    return order


def rewrite(epi: Epilogue, rule) -> Epilogue:
    """Rebuild the DAG bottom-up, replacing each node `n` (with rewritten args) by `rule(n)`."""
    memo: dict[Node, Node] = {}
    for node in epi.nodes():
        memo[node] = rule(node.with_args(tuple(memo[a] for a in node.args)))
    outputs = tuple(replace(o, value=memo[o.value]) for o in epi.outputs)
    return epi.replace(outputs=outputs)


def format_epilogue(epi: Epilogue) -> str:
    """A readable SSA listing of the program: what `explain()` shows and tests compare."""
    params = ", ".join(f"{p.name}: {p.kind or '?'}" for p in epi.params.values())
    lines = [f"epilogue {epi.name}({params})"]
    names: dict[Node, str] = {}
    for node in epi.nodes():
        names[node] = f"%{len(names)}"
        args = " ".join(names[a] for a in node.args)
        arg = "" if node.arg is None else f" [{node.arg!r}]"
        lines.append(f"  {names[node]} = {node.op}{arg} {args}".rstrip())
    for out in epi.outputs:
        what = f"{out.reduction} {names[out.value]}" if out.reduction else names[out.value]
        lines.append(f"  {out.name} <- {what}")
    return "\n".join(lines)
