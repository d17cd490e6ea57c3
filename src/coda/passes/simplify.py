"""Constant folding and algebraic simplification, as node rewrite rules.

Only rewrites that are exact in floating point, the sign of a zero included (or change rounding
by less than one float32 operation would) are applied: x*1, x+(-0), x-(+0), x/1, --x, (-0)-x ->
-x, dropout(x, 0) -> x, and scale folding (x*c1)*c2 -> x*(c1*c2) where c1*c2 is a normal
float32 number (a product that overflows or underflows in float32 would make x*(c1*c2) NaN, inf
or 0 where the two products are not; where x*c1 alone overflows, the fold is the finite one).
`x*0` is kept: it is NaN for infinite x; and so are x+(+0) and (+0)-x, which are +0 where x is
-0 (+0).
"""

from __future__ import annotations

import math

import torch

from ..ir import Epilogue, Node, rewrite
from ..primitives import PRIMITIVES

#: operations whose constant argument moves second; not min and max, whose result at a tie of
#: zeros follows the order (torch's max(0.0, -0.0) is 0.0, max(-0.0, 0.0) is -0.0)
_COMMUTATIVE = ("add", "mul", "eq", "ne")
#: the scales a fold may make: normal float32 numbers
FLOAT32_NORMAL, FLOAT32_MAX = torch.finfo(torch.float32).tiny, torch.finfo(torch.float32).max


def _const(node: Node) -> float | None:
    return node.arg if node.op == "const" else None


def fold_constants(epi: Epilogue) -> Epilogue:
    """Evaluate element-wise nodes whose arguments are all constants (in float64)."""
    def rule(node: Node) -> Node:
        prim = PRIMITIVES.get(node.op)
        if prim is None or prim.form != "elementwise" or not node.args:
            return node
        if any(a.op != "const" for a in node.args):
            return node
        value = prim.ref(*(torch.tensor(a.arg, dtype=torch.float64) for a in node.args))
        return Node("const", (), float(value), node.loc)
    return rewrite(epi, rule)


def simplify(epi: Epilogue) -> Epilogue:
    """Apply the algebraic identities until none applies (each rewrite shrinks the DAG)."""
    return rewrite(epi, _simplify_node)


def _simplify_node(node: Node) -> Node:
    op, args = node.op, node.args
    if op in _COMMUTATIVE and _const(args[0]) is not None and _const(args[1]) is None:
        node = Node(op, (args[1], args[0]), None, node.loc)
        args = node.args
    c = _const(args[1]) if len(args) == 2 else None
    if c == 0.0 and (op, math.copysign(1.0, c)) in (("add", -1.0), ("sub", 1.0)):
        return args[0]
    if op in ("mul", "div") and c == 1.0:
        return args[0]
    if op == "mul" and c == -1.0:
        return _simplify_node(Node("neg", (args[0],), None, node.loc))
    if op == "sub" and _const(args[0]) == 0.0 and math.copysign(1.0, args[0].arg) < 0:
        return _simplify_node(Node("neg", (args[1],), None, node.loc))
    if op == "neg" and args[0].op == "neg":
        return args[0].args[0]
    if op == "neg" and args[0].op == "mul" and _const(args[0].args[1]) is not None:
        inner = args[0]
        return _scaled(inner.args[0], -inner.args[1].arg, node)
    if op == "mul" and c is not None and args[0].op == "mul" and _const(args[0].args[1]) is not None:
        return _scaled(args[0].args[0], args[0].args[1].arg * c, node)
    if op == "mul" and c is not None and args[0].op == "neg":
        return _scaled(args[0].args[0], -c, node)
    if op == "dropout" and _const(args[1]) == 0.0:
        return args[0]
    return node


def _scaled(x: Node, scale: float, like: Node) -> Node:
    """x * scale, the folded form of `like`, or `like` as it is where the scale is no normal
    float32 number."""
    if not FLOAT32_NORMAL <= abs(scale) <= FLOAT32_MAX:
        return like
    return _simplify_node(Node("mul", (x, Node("const", (), scale)), None, like.loc))
