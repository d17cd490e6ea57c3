"""Common-subexpression elimination and dead-code elimination."""

from __future__ import annotations

from ..ir import Epilogue, Node, rewrite


def cse(epi: Epilogue) -> Epilogue:
    """Make structurally equal nodes one object, so each is computed (and loaded) once."""
    interned: dict[Node, Node] = {}
    return rewrite(epi, lambda node: interned.setdefault(node, node))


def dce(epi: Epilogue) -> Epilogue:
    """Drop inferred operands that no output depends on any more (declared ones stay bindable).

    Dead statements never reach the IR: outputs reference only the nodes they need.
    """
    used = {n.arg for n in epi.nodes() if n.op == "operand"}
    return epi.replace(params={k: p for k, p in epi.params.items() if k in used or p.declared})
