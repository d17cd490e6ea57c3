"""Compiler passes, each a plain function Epilogue -> Epilogue (or -> facts about it)."""

from __future__ import annotations

from ..ir import Epilogue
from .cleanup import cse, dce
from .kinds import infer_kinds
from .legality import check
from .simplify import fold_constants, simplify
from .widths import Widths, widths

__all__ = ["Widths", "check", "cse", "dce", "fold_constants", "infer_kinds", "optimize",
           "simplify", "widths"]

# Folding first, so that `check` sees constant expressions (`dropout(x, -0.1)`) as constants.
PIPELINE = (fold_constants, check, simplify, fold_constants, cse, dce)


def optimize(epi: Epilogue) -> Epilogue:
    """Check the program, then fold, simplify, share equal subexpressions and prune operands."""
    for run in PIPELINE:
        epi = run(epi)
    return epi
