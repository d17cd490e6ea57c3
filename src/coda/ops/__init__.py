"""Transformer operators as GEMM + epilogue programs, forward and backward.

Each op is a `torch.autograd.Function` whose passes are CODA programs (see docs/ops.md).
"""

from .common import as_rows, matmul, weight_grad
from .dropout import dropout
from .linear import linear, mlp

__all__ = ["as_rows", "dropout", "linear", "matmul", "mlp", "weight_grad"]
