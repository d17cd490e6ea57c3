"""Linear layers and the two-layer MLP, with bias, activation and dropout fused into the GEMMs.

x is [..., K] (viewed as rows [M, K]); weights have nn.Linear's layout, w: [N, K]; f is the
activation and f' its derivative, both evaluated at the pre-activation. The backward needs the
pre-activation only through f'(pre): the forward saves that slope, not the pre-activation (same
size, computed beside f from the same tanh or erf), so the backward multiplies by a tile instead
of evaluating f' again (measured: docs/benchmarks-log.md, twenty-third session).

linear(x, w, bias, activation, dropout_p):
    pre = x @ w.T + bias,  y = dropout(f(pre), p)
  forward   y (and slope) = forward_program  GEMM x @ w.T; epilogue: + bias, save slope = f'(pre)
                            (only when f' exists and a gradient is wanted), f, dropout
  backward  dpre, db      = backward_program.map(dy): dropout(dy, p) * slope, db = col_sum(dpre)
            dx            = dpre @ w      (matmul)
            dw            = dpre.T @ x    (weight_grad)
  dy comes from outside CODA (no CODA GEMM produces it), so f' and the bias gradient take one map
  program over dy. Without activation and dropout dpre = dy, and dx's GEMM (CODA's) sums dy's
  columns from the tiles its K loop loads (`a_col_sums=True`): the bias gradient, no map.

mlp(x, w1, b1, w2, b2, activation, dropout_p, residual, stats):
    pre = x @ w1.T + b1,  h = f(pre),  y = dropout(h @ w2.T + b2, p) + residual
  forward   h, slope      = forward_program  GEMM x @ w1.T; epilogue: + b1, save slope = f'(pre), f
            y, [ss, s]    = forward_program  GEMM h @ w2.T; epilogue: + b2, dropout, + residual,
                            and with stats the next norm's row sums ss = Σ y², s = Σ y
  backward  dy', db2      = backward_program.map(dy): dropout(dy, p), db2 = col_sum(dy')
                            (without dropout dy' = dy: db2 is the column sums a LayerNorm after
                            the MLP noted for dy (common.known_column_sums), else dh's GEMM
                            below sums its columns from its K loop, `a_col_sums=True`)
            dw2           = dy'.T @ h     (weight_grad; h is the saved fc1 output)
            dpre, db1     = backward_program  GEMM dy' @ w2; epilogue: * slope, db1 = col_sum
            dx, dw1       = dpre @ w1, dpre.T @ x
            dresidual     = dy
  The fc1 derivative and its bias gradient ride in the epilogue of the GEMM that produces dh, so
  dh is never written and dpre takes no extra pass. When the residual is x itself (a post-norm
  block, y = x + MLP(x)), x's two gradients are summed in dx's epilogue (dx = dpre @ w1 + dy),
  where autograd would add them in a third kernel.

Dropout's mask is a function of (seed, row, column) of the output (docs/dsl.md#dropout): the
backward regenerates it from the saved seed. Without a seed one is drawn from torch's CPU
generator. Programs are built from one template per role (forward, backward) and cached per
variant (activation x bias x dropout x residual x saved slope).
"""

from __future__ import annotations

import functools

import torch

from .. import compile as compile_program
from ..errors import LaunchError
from ..runtime.program import Program
from . import checks
from .common import (
    STATS,
    as_rows,
    as_stored,
    column_sum,
    follows_autocast,
    input_and_bias_grad,
    input_grad,
    known_column_sums,
    matmul,
    op_function,
    present,
    stored,
    weight_grad,
    with_stats,
)
from .dropout import check_probability, resolve_seed

#: activation -> (f, f') as DSL expressions of the pre-activation `{h}`; f' None: no derivative
#: to apply, so no slope is saved for it.
ACTIVATIONS: dict[str | None, tuple[str, str | None]] = {
    None: ("{h}", None),
    "gelu": ("gelu({h})", "gelu_grad({h})"),             # tanh approximation
    "gelu_erf": ("gelu_erf({h})", "gelu_erf_grad({h})"),  # exact
    "relu": ("relu({h})", "relu_grad({h})"),
    "silu": ("silu({h})", "silu_grad({h})"),
    "squared_relu": ("square(relu({h}))", "2.0 * relu({h})"),
}


@functools.cache
def forward_program(activation: str | None, bias: bool, dropout: bool, residual: bool,
                    save_slope: bool, stats: torch.dtype | None = None) -> Program:
    """`output = dropout(f(input + bias), p) + residual`, with `save slope = f'(input + bias)` if
    asked, and with `stats` (the output's dtype) the row sums a following norm needs,
    `ss = Σ output²` and `s = Σ output` (launched with outputs= naming those wanted) of the
    output as stored (`as_stored`).

    For example ("gelu", True, True, False, True) is
        EPILOGUE linear_gelu(bias: col, p: scalar) {
          h = input + bias; save slope = gelu_grad(h); output = dropout(gelu(h), p);
        }
    (the tanh that gelu and gelu_grad share is computed once).
    """
    f = ACTIVATIONS[activation][0].format(h="h")
    y = f"dropout({f}, p)" if dropout else f
    y = f"{y} + residual" if residual else y
    if stats is not None:
        y = as_stored(y, stats)
    params = ["bias: col"] * bias + ["p: scalar"] * dropout + ["residual: tile"] * residual
    body = ["h = input + bias;" if bias else "h = input;"]
    if save_slope:
        body.append(f"save slope = {ACTIVATIONS[activation][1].format(h='h')};")
    body.append(f"output = {y};")
    if stats is not None:
        body.append("ss = row_sum(output * output); s = row_sum(output);")
    return compile_program(f"EPILOGUE linear_{activation or 'identity'}({', '.join(params)}) "
                           f"{{ {' '.join(body)} }}")


def activation_reference(activation: str | None, x: torch.Tensor) -> torch.Tensor:
    """f(x) for one of the ops' activation names, x [rows, n], on the reference backend: what a
    module converted to one (`coda.nn`'s `from_torch`) must compute."""
    return forward_program(activation, False, False, False, False).map(x, backend="reference")["output"]


@functools.cache
def backward_program(activation: str | None, dropout: bool, bias_grad: bool) -> Program:
    """`output = dropout(input, p) * slope` (slope = f'(pre), saved by the forward) and
    `db = col_sum(output)` if asked: the gradient at the pre-activation and the bias gradient.
    Launched as `.map(dy)` on an incoming gradient, or as the epilogue of the GEMM `dy @ w` that
    produces it.

    For example ("gelu", False, True) is
        EPILOGUE linear_gelu_grad(slope: tile) {
          output = input * slope; db = col_sum(output);
        }
    """
    slope = ACTIVATIONS[activation][1] is not None
    g = "dropout(input, p)" if dropout else "input"
    g = f"{g} * slope" if slope else g
    params = ["slope: tile"] * slope + ["p: scalar"] * dropout
    body = [f"output = {g};"]
    if bias_grad:
        body.append("db = col_sum(output);")
    return compile_program(f"EPILOGUE linear_{activation or 'identity'}_grad({', '.join(params)}) "
                           f"{{ {' '.join(body)} }}")


def grad_at_preactivation(dy: torch.Tensor, activation: str | None, p: float, seed: int | None,
                          slope: torch.Tensor | None, bias_dtype: torch.dtype | None
                          ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(dpre, db) for an incoming gradient dy [M, N] that no CODA GEMM produced:
    dpre = dropout(dy, p) * slope (f' at the pre-activation) and db = col_sum(dpre), stored in
    `bias_dtype` (None: no bias, no db)."""
    if activation is None and p == 0.0:
        return dy, None if bias_dtype is None else column_sum(dy, bias_dtype)
    prog = backward_program(activation, p > 0.0, bias_dtype is not None)
    outs = prog.map(dy, seed=seed, dtypes=stored(db=bias_dtype), **present(slope=slope, p=p or None))
    return outs["output"], outs.get("db")


@op_function
class LinearFunction(torch.autograd.Function):
    """y = dropout(f(x @ w.T + bias), p): one GEMM forward; one map and two GEMMs backward."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None,
                activation: str | None, p: float, seed: int | None, grad: bool) -> torch.Tensor:
        rows, lead = as_rows(x)
        save_slope = grad and ACTIVATIONS[activation][1] is not None
        if activation is None and bias is None and p == 0.0:   # no epilogue: cuBLAS's GEMM
            outs = {"output": matmul(rows, w.T)}
        else:
            prog = forward_program(activation, bias is not None, p > 0.0, False, save_slope)
            outs = prog(rows, w.T, seed=seed, **present(bias=bias, p=p or None))
        ctx.save_for_backward(x, w, outs.get("slope"))
        ctx.activation, ctx.p, ctx.seed = activation, p, seed
        ctx.bias_dtype = None if bias is None else bias.dtype
        return outs["output"].reshape(*lead, w.shape[0])

    @staticmethod
    def backward(ctx, dy: torch.Tensor):
        x, w, slope = ctx.saved_tensors
        need_x, need_w, need_b = ctx.needs_input_grad[:3]
        bias_dtype = ctx.bias_dtype if need_b else None
        if ctx.activation is None and ctx.p == 0.0:   # dy is dpre (a norm after it may have summed it)
            dpre = as_rows(dy)[0]
            known = known_column_sums(dy, bias_dtype) if bias_dtype is not None else None
            dx, db = input_and_bias_grad(dpre, w, need_x, bias_dtype, known)
        else:
            dpre, db = grad_at_preactivation(as_rows(dy)[0], ctx.activation, ctx.p, ctx.seed, slope,
                                             bias_dtype)
            dx = input_grad(dpre, w) if need_x else None
        dx = None if dx is None else dx.reshape(x.shape)
        dw = weight_grad(dpre, as_rows(x)[0], like=w) if need_w else None
        return dx, dw, db, None, None, None, None


@op_function
class MLPFunction(torch.autograd.Function):
    """y = dropout(f(x @ w1.T + b1) @ w2.T + b2, p) + residual (and its row sums): two GEMMs
    forward; backward one map (with dropout) and five GEMMs, fc1's derivative and bias gradient
    in dh's epilogue."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor | None, w2: torch.Tensor,
                b2: torch.Tensor | None, activation: str | None, p: float, seed: int | None,
                residual: torch.Tensor | None, grad: bool, stats: str | None = None):
        ctx.set_materialize_grads(False)   # no zero tensors for the row sums' gradients
        rows, lead = as_rows(x)
        save_slope = grad and ACTIVATIONS[activation][1] is not None
        fc1 = forward_program(activation, b1 is not None, False, False, save_slope)
        outs = fc1(rows, w1.T, **present(bias=b1))
        h = outs["output"]
        fc2 = forward_program(None, b2 is not None, p > 0.0, residual is not None, False,
                              h.dtype if stats else None)
        res = None if residual is None else as_rows(residual, "residual")[0]
        fc2_outs = fc2(h, w2.T, seed=seed, outputs=["output", *STATS[stats]],
                       **present(bias=b2, p=p or None, residual=res))
        ctx.save_for_backward(x, w1, w2, outs.get("slope"), h)
        ctx.activation, ctx.p, ctx.seed = activation, p, seed
        ctx.bias_dtypes = tuple(None if b is None else b.dtype for b in (b1, b2))
        ctx.residual_is_x = residual is x
        y = fc2_outs["output"].reshape(*lead, w2.shape[0])
        return with_stats(ctx, y, fc2_outs, stats, lead)

    @staticmethod
    def backward(ctx, dy: torch.Tensor | None, *unused_stat_grads):
        if dy is None:   # only the row sums were used
            return (None,) * 11
        x, w1, w2, slope, h = ctx.saved_tensors
        need_x, need_w1, need_b1, need_w2, need_b2 = ctx.needs_input_grad[:5]
        # the residual's gradient, dy, joins x's in dx's epilogue when the residual is x
        fold = ctx.residual_is_x and need_x
        dresidual = dy if ctx.needs_input_grad[8] and not fold else None
        if not any(ctx.needs_input_grad[:5]):
            return None, None, None, None, None, None, None, None, dresidual, None, None
        b1_dtype, b2_dtype = (dtype if need else None
                              for dtype, need in zip(ctx.bias_dtypes, (need_b1, need_b2), strict=True))
        dh_gemm = need_x or need_w1 or need_b1
        # without dropout dy' is dy, whose column sums (db2) the norm after this MLP may have
        # formed; else dh's GEMM takes them from its K loop
        known = known_column_sums(dy, b2_dtype) if ctx.p == 0.0 and b2_dtype is not None else None
        sum_in_gemm = dh_gemm and ctx.p == 0.0 and b2_dtype is not None and known is None
        dy2, db2 = grad_at_preactivation(as_rows(dy)[0], None, ctx.p, ctx.seed, None,
                                         None if sum_in_gemm or known is not None else b2_dtype)
        db2 = known if known is not None else db2
        dw2 = weight_grad(dy2, h, like=w2) if need_w2 else None
        dx = dw1 = db1 = None
        if dh_gemm:
            # dh = dy' @ w2 is never written: its epilogue applies the slope and sums db1.
            prog = backward_program(ctx.activation, False, need_b1)
            outs = prog(dy2, w2, dtypes=stored(db=b1_dtype, a_col_sums=b2_dtype if sum_in_gemm else None),
                        a_col_sums=sum_in_gemm, **present(slope=slope))
            dpre, db1 = outs["output"], outs.get("db")
            db2 = outs["a_col_sums"] if sum_in_gemm else db2
            dx = input_grad(dpre, w1, dy if fold else None).reshape(x.shape) if need_x else None
            dw1 = weight_grad(dpre, as_rows(x)[0], like=w1) if need_w1 else None
        return dx, dw1, db1, dw2, db2, None, None, None, dresidual, None, None


@follows_autocast()
def linear(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None,
           activation: str | None = None, dropout_p: float = 0.0, seed: int | None = None
           ) -> torch.Tensor:
    """`dropout(f(x @ w.T + bias), dropout_p)`: x [..., K], w [N, K], bias [N] -> [..., N].

    activation: None, "gelu" (tanh approximation), "gelu_erf", "relu", "silu" or "squared_relu"
    (relu(x)**2). The dropout mask is keyed on `seed` (drawn from torch's CPU generator when None).
    """
    check_activation(activation)
    _check_input(x)
    n = checks.weight("w", w, x, x.shape[-1])
    checks.optional_tensor("bias", bias, (n,), x)
    p = check_probability(dropout_p, "dropout_p")
    from ..integrations import compile as custom  # here: that module imports this one
    if custom.routed():   # inside torch.compile: the custom op coda::linear, no graph break
        return custom.linear_op(x, w, bias, activation, p, seed, _grad_wanted(x, w, bias))
    seed = resolve_seed(p, seed)
    return LinearFunction.apply(x, w, bias, activation, p, seed, _grad_wanted(x, w, bias))


@follows_autocast()
def mlp(x: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor | None, w2: torch.Tensor,
        b2: torch.Tensor | None = None, activation: str | None = "gelu", dropout_p: float = 0.0,
        seed: int | None = None, residual: torch.Tensor | None = None, stats: str | None = None
        ) -> torch.Tensor | tuple[torch.Tensor, ...]:
    """`dropout(f(x @ w1.T + b1) @ w2.T + b2, dropout_p) + residual`.

    x [..., K], w1 [N1, K], b1 [N1], w2 [N2, N1], b2 [N2], residual [..., N2] -> [..., N2].
    activation as in `linear`; dropout (keyed on `seed`) is applied after fc2, before the residual.
    stats: None, or the row sums a following norm needs, summed in fc2's epilogue as
    `out_proj_residual` does: (y, ss) for "rms", (y, ss, s) for "layer" (ss = Σ y², s = Σ y per
    row, float32, not differentiable), e.g. for a post-norm block `layer_norm(y, ..., rowsum=s,
    sumsq=ss)`. With `residual=x` x's two gradients are summed in one GEMM's epilogue.
    """
    check_activation(activation)
    _check_input(x)
    n1 = checks.weight("w1", w1, x, x.shape[-1])
    n2 = checks.weight("w2", w2, x, n1, "w1's out_features")
    checks.optional_tensor("b1", b1, (n1,), x)
    checks.optional_tensor("b2", b2, (n2,), x)
    if residual is not None and (not isinstance(residual, torch.Tensor)
                                 or residual.shape != (*x.shape[:-1], n2)
                                 or not residual.is_floating_point()):
        raise LaunchError(f"residual must be a floating-point tensor of the output's shape "
                          f"{[*x.shape[:-1], n2]}, got {checks.describe(residual)}")
    if stats not in STATS:
        raise LaunchError(f"mlp: stats must be one of {tuple(STATS)}, got {stats!r}")
    p = check_probability(dropout_p, "dropout_p")
    grad = _grad_wanted(x, w1, b1, w2, b2)
    from ..integrations import compile as custom  # here: that module imports this one
    if custom.routed():   # inside torch.compile: the custom op coda::mlp, no graph break
        return custom.mlp_op(x, w1, b1, w2, b2, activation, p, seed, residual, grad, stats)
    seed = resolve_seed(p, seed)
    return MLPFunction.apply(x, w1, b1, w2, b2, activation, p, seed, residual, grad, stats)


def _grad_wanted(*tensors: torch.Tensor | None) -> bool:
    """Whether a backward can follow (the forward saves the slope only then)."""
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)



# argument checks: every mistake a LaunchError naming the argument ---------------------------------
def check_activation(activation: object) -> None:
    if not isinstance(activation, (str, type(None))) or activation not in ACTIVATIONS:
        names = ", ".join(repr(a) for a in ACTIVATIONS)
        raise LaunchError(f"activation must be one of {names}; got {activation!r}")


def _check_input(x: object) -> None:
    if not isinstance(x, torch.Tensor) or x.dim() == 0:
        raise LaunchError(f"x must be a tensor [..., in_features], got {checks.describe(x)}")
    if not x.is_floating_point():
        raise LaunchError(f"x has dtype {x.dtype}; expected float16, bfloat16, float32 or float64")



