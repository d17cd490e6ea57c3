"""Which values are exactly zero past the edge of the output, so a reduction needs no mask there.

A tile at the right or bottom edge of the output holds columns past N (or rows past M). A row
reduction must not count the columns past N, so the generated code sets them to zero before it
sums: one select per element, on every tile. Often the value is zero there already: the TMA
mainloops read A and B zero-filled past their edges, so the accumulator is zero past M and N;
tile operands are loaded with zero there, and a column operand is zero past N (a row operand
past M). `(input + residual)^2` and `grad * gelu_grad(pre)` are then zero too, and the select
is dropped. The proof is structural (zero stays zero through these operations), never a
floating-point evaluation that might round differently in the kernel; the other factor of a
product must be finite there, which is checked by evaluating it in float32.
"""

from __future__ import annotations

import math

import torch

from ..ir import Node, toposort
from ..primitives import PRIMITIVES

#: Functions f with f(0) = 0 exactly as the kernels compute them (tl_math's and Triton's).
ZERO_AT_ZERO = frozenset({"neg", "abs", "square", "relu", "gelu", "gelu_erf", "silu", "tanh", "sqrt",
                          "round_bf16", "round_fp16", "dropout"})
#: Functions of two (or three, `where`'s two branches) values that are zero where those are.
ZERO_OF_ZEROS = frozenset({"add", "sub", "min", "max"})


def zero_past_edge(node: Node, axis: str, kinds: dict[str, str], input_zero: bool) -> bool:
    """Whether `node` is exactly 0.0 past the output's edge along `axis` ("col": the columns
    past N, "row": the rows past M). `kinds` are the operands' kinds; `input_zero` says the
    mainloop's accumulator is zero there (the TMA mainloops and the map kernel, not the
    portable one, which wraps its rows and columns around)."""
    edge = _Edge(axis, kinds, input_zero)
    for n in toposort([node]):   # each node after its arguments: no recursion down long chains
        edge.zeros[n] = edge.zero(n)
        edge.values[n] = edge.value(n)
    return edge.zeros[node]


class _Edge:
    """What each node is past the edge, filled in argument-first order by `zero_past_edge`."""

    def __init__(self, axis: str, kinds: dict[str, str], input_zero: bool):
        self.axis, self.kinds, self.input_zero = axis, kinds, input_zero
        self.zeros: dict[Node, bool] = {}
        self.values: dict[Node, float | None] = {}

    def zero(self, node: Node) -> bool:
        op, args = node.op, node.args
        if op == "input":
            return self.input_zero
        if op == "operand":
            return self.kinds[node.arg] in ("tile", self.axis)   # loaded as zero past the edge
        if op == "const":
            return node.arg == 0
        if op == "mul":
            a, b = args
            return (self.zeros[a] and self.finite(b)) or (self.zeros[b] and self.finite(a))
        if op in ZERO_AT_ZERO:
            return self.zeros[args[0]]
        if op in ZERO_OF_ZEROS:
            return all(self.zeros[a] for a in args)
        if op == "where":
            return self.zeros[args[1]] and self.zeros[args[2]]
        return False

    def finite(self, node: Node) -> bool:
        value = self.values[node]
        return value is not None and math.isfinite(value)

    def value(self, node: Node) -> float | None:
        """The float32 value past the edge, where every leaf it depends on is known there."""
        if self.zeros[node]:
            return 0.0
        if node.op == "const":
            return float(node.arg)
        primitive = PRIMITIVES.get(node.op)
        if primitive is None or primitive.form != "elementwise":
            return None
        values = [self.values[a] for a in node.args]
        if any(v is None for v in values):
            return None
        return float(primitive.ref(*(torch.tensor(v, dtype=torch.float32) for v in values)))
