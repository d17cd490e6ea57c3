"""Pieces every op shares: flattening to rows, the plain GEMM, and weight gradients.

Every GEMM in `coda.ops` is a CODA program (the library eats its own cooking); these two are the
ones with no epilogue worth a name.
"""

from __future__ import annotations

import torch

from .. import compile as compile_program

PLAIN = compile_program("EPILOGUE plain() { output = input; }")
ACCUMULATE = compile_program("EPILOGUE accumulate() { output += input; }")
# Row and column sums of a tensor (a map launched with outputs= naming the sums it needs).
SUMS = compile_program("EPILOGUE sums() { output = input; rows = row_sum(input); cols = col_sum(input); }")


def present(**operands: object) -> dict[str, object]:
    """The launch operands that are given: None marks one that this variant does not declare."""
    return {name: value for name, value in operands.items() if value is not None}


def column_sum(t: torch.Tensor) -> torch.Tensor:
    """The sum over the rows of t [M, N] -> [N] (float32; float64 for float64): one map reading
    t, which writes nothing else (a bias gradient)."""
    return SUMS.map(t, outputs=["cols"])["cols"]


def as_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Size]:
    """`x` as [rows, features] (a view when possible) and its leading shape, to restore later."""
    return x.reshape(-1, x.shape[-1]), x.shape[:-1]


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """`a @ b` through CODA's GEMM (any strides: pass `w.T` for an nn.Linear weight)."""
    return PLAIN(a, b)["output"]


def weight_grad(dy: torch.Tensor, x: torch.Tensor, into: torch.Tensor | None = None) -> torch.Tensor:
    """`dy.T @ x` ([N, M] @ [M, K] = [N, K]), the gradient of an nn.Linear weight; with `into`
    (a [N, K] buffer of the output dtype, e.g. an existing `.grad`) it is accumulated there."""
    if into is None:
        return PLAIN(dy.T, x)["output"]
    return ACCUMULATE(dy.T, x, out=into)["output"]
