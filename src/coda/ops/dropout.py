"""Dropout as a CODA map program, forward and backward.

    y  = dropout(x, p)  = m ⊙ x / (1 - p),   m[i, j] = [u(seed, i, j) >= p]
    dx = dropout(dy, p) = m ⊙ dy / (1 - p)   (the same seed regenerates the same mask)

`u` is CODA's counter-based uniform of (seed, row, column) in the [rows, features] view of x
(docs/dsl.md#dropout): it depends on nothing else, so the backward regenerates the forward mask
from the seed alone and nothing but the seed is saved. Forward and backward are one program,
`DROPOUT.map(...)`: one kernel each, reading and writing the tensor once.

This op is for dropout that no GEMM precedes (on embeddings, on attention probabilities). After a
linear layer use `coda.ops.linear(..., dropout_p=p)` or `coda.ops.mlp(..., dropout_p=p)`
instead: there the mask is applied in the GEMM's epilogue, forward and backward, and costs no pass.
"""

from __future__ import annotations

import torch

from .. import compile as compile_program
from ..errors import LaunchError
from . import checks
from .common import as_rows, op_function

# The element-wise step, run as a map program over x (forward) or dy (backward).
DROPOUT = compile_program("EPILOGUE dropout_map(p: scalar) { output = dropout(input, p); }")


def check_probability(p: float, name: str = "p") -> float:
    """`p` as a float in [0, 1], or a LaunchError naming the argument."""
    if not checks.real(p) or not 0.0 <= p <= 1.0:
        raise LaunchError(f"{name} must be a number in [0, 1], got {p!r}")
    return float(p)


def resolve_seed(p: float, seed: int | None, name: str = "seed") -> int | None:
    """The seed of a dropout with probability p: None when p == 0 (no mask), the caller's seed, or
    one drawn from torch's default CPU generator (so `torch.manual_seed` makes runs repeatable)."""
    if p == 0.0:
        return None
    if seed is None:
        if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
            raise LaunchError(f"dropout with {name}=None while a CUDA graph is being captured: the "
                              f"seed drawn now would be replayed at every step (the same mask each "
                              f"time). Capture without dropout, or pass {name}= and accept that the "
                              f"graph replays that mask")
        return int(torch.randint(2**31, ()).item())  # < 2**31: a signed int32 at launch
    if not checks.integer(seed):
        raise LaunchError(f"{name} must be an int or None, got {seed!r}")
    return int(seed)


@op_function
class DropoutFunction(torch.autograd.Function):
    """dropout(x, p) with an explicit seed; backward is the same map with the same seed."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, p: float, seed: int) -> torch.Tensor:
        ctx.p, ctx.seed = p, seed
        return DROPOUT.map(as_rows(x)[0], p=p, seed=seed)["output"].reshape(x.shape)

    @staticmethod
    def backward(ctx, dy: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        dx = DROPOUT.map(as_rows(dy)[0], p=ctx.p, seed=ctx.seed)["output"]
        return dx.reshape(dy.shape), None, None


def dropout(x: torch.Tensor, p: float, seed: int | None = None) -> torch.Tensor:
    """Zero each element of x with probability p and scale the rest by 1 / (1 - p).

    x: [..., N], float16 / bfloat16 / float32 (float64 on the reference backend). The mask is a
    function of (seed, row, column) of x viewed as [rows, N]; without `seed` one is drawn from
    torch's CPU generator. p == 0 returns x itself (no kernel).
    """
    if not isinstance(x, torch.Tensor) or x.dim() == 0:
        raise LaunchError(f"x must be a tensor with at least one dimension, got {checks.describe(x)}")
    if not x.is_floating_point():
        raise LaunchError(f"x has dtype {x.dtype}; expected float16, bfloat16, float32 or float64")
    p = check_probability(p)
    from ..integrations import compile as custom  # here: that module imports this one
    if custom.routed():   # inside torch.compile: the custom op coda::dropout, no graph break
        return custom.dropout_op(x, p, seed)
    seed = resolve_seed(p, seed)
    if seed is None:
        return x
    return DropoutFunction.apply(x, p, seed)

