"""LayerNorm and RMSNorm as CODA programs, for the norms no GEMM can absorb.

In GPT-2, ln_1 folds into the QKV GEMM (`coda.ops.norms.layer_norm_linear`), but ln_2 feeds
`coda.ops.mlp`, whose fc1 takes a plain input, and ln_f feeds `linear_cross_entropy`, which folds
only an RMSNorm: those two run here. x is [..., n] (viewed as rows [M, n]); g, beta are [n].

    LayerNorm  y = xhat ⊙ g + beta,   xhat = (x - mean) rstd,   mean = Σ x / n,   rstd = rsqrt(var + eps)
    RMSNorm    y = xhat ⊙ g,          xhat = x rstd,            rstd = rsqrt(Σ x² / n + eps)

forward   s, ss         = LN_STATS.map(x): shifted row sums (coda.ops.norms), skipped when the
                          producer of x summed them (out_proj_residual(..., stats="layer"));
                          RMSNorm: ss = RMS_STATS.map(x), skipped with stats="rms"
          y             = LAYER_NORM.map(x) (RMS_NORM.map(x)): rstd (and mean) per row from the
                          sums, then the affine map
          Without given sums, where the Triton backend runs and a row has at most ONE_PASS_MAX_N
          values, the forward is instead one hand-written pass over whole rows
          (coda.nn.layer_norm_forward) that forms the sums and y: x is read once.
backward  (dxhat = dy ⊙ g)
          a, b, dg, dβ  = LN_GRAD_SUMS.map(dy): a = Σ_k dxhat, b = Σ_k dxhat xhat per row,
                          dg = Σ_m dy xhat, dβ = Σ_m dy per column (no tile is written)
          dx            = LN_GRAD_DX.map(dy): rstd (dxhat - (a + xhat b) / n)
          RMSNorm: b, dg = RMS_GRAD_SUMS.map(dy), dx = RMS_GRAD_DX.map(dy): rstd (dxhat - xhat b / n)
          Where the Triton backend runs and a row has at most ONE_PASS_MAX_N values, the backward
          is instead one hand-written pass that holds whole rows (coda.nn.layer_norm_grad): dy and
          x are read once, not twice; these maps are then the reference backend's path.
Only x and the row sums are saved; xhat is recomputed in each epilogue (a few flops per element).
The sums are statistics, not differentiated: the backward differentiates through rstd(x) and
mean(x) itself, so given sums must be those of this x.
"""

from __future__ import annotations

import torch

from .. import compile as compile_program
from ..errors import LaunchError
from ..ops import checks
from ..ops.common import as_rows, follows_autocast, note_column_sums, notes_from, op_function
from ..ops.norms import (
    LN_ROW,
    LN_ROW_PARAMS,
    LN_STATS,
    RMS_ROW,
    RMS_ROW_PARAMS,
    RMS_STATS,
    layer_norm_one_pass,
    residual_grad,
    row_shift,
)

XHAT = "xhat = (xin - mean) * rstd;"
LAYER_NORM = compile_program(f"EPILOGUE layer_norm({LN_ROW_PARAMS}, g: col, beta: col) {{ {LN_ROW}"
                             " output = (input - mean) * rstd * g + beta; }")
LN_GRAD_SUMS = compile_program(f"EPILOGUE layer_norm_sums({LN_ROW_PARAMS}, g: col, xin: tile) {{"
                               f" {LN_ROW} {XHAT} dxhat = input * g; output = dxhat;"
                               " a = row_sum(dxhat); b = row_sum(dxhat * xhat);"
                               " dg = col_sum(input * xhat); dbeta = col_sum(input); }")
# [True]: plus dres, the gradient of the passed-through x (layer_norm(..., passthrough=True))
LN_GRAD_DX = {res: compile_program(
    f"EPILOGUE layer_norm_dx({LN_ROW_PARAMS}, g: col, xin: tile, a: row, b: row{', dres: tile' * res}) {{"
    f" {LN_ROW} {XHAT} output = rstd * (input * g - (a + xhat * b) * inv_n){' + dres' * res}; }}")
    for res in (False, True)}
RMS_NORM = compile_program(f"EPILOGUE rms_norm({RMS_ROW_PARAMS}, g: col) {{ {RMS_ROW}"
                           " output = input * rstd * g; }")
RMS_GRAD_SUMS = compile_program(f"EPILOGUE rms_norm_sums({RMS_ROW_PARAMS}, g: col, xin: tile) {{"
                                f" {RMS_ROW} xhat = xin * rstd; dxhat = input * g; output = dxhat;"
                                " b = row_sum(dxhat * xhat); dg = col_sum(input * xhat); }")
RMS_GRAD_DX = {res: compile_program(
    f"EPILOGUE rms_norm_dx({RMS_ROW_PARAMS}, g: col, xin: tile, b: row{', dres: tile' * res}) {{"
    f" {RMS_ROW} output = rstd * (input * g - xin * rstd * b * inv_n){' + dres' * res}; }}")
    for res in (False, True)}


def row_operands(rows: torch.Tensor, s: torch.Tensor | None, ss: torch.Tensor, eps: float, shifted: bool
                 ) -> dict:
    """The row operands of LN_ROW (shift, s, ss; `shifted`: the sums are about each row's first
    value), or of RMS_ROW (ss alone) where `s` is None."""
    row = dict(ss=ss.reshape(-1), inv_n=1.0 / rows.shape[1], eps=eps)
    return row if s is None else row | dict(shift=row_shift(rows, shifted), s=s.reshape(-1))


@op_function
class NormFunction(torch.autograd.Function):
    """LayerNorm(x) ⊙ g + beta, or RMSNorm(x) ⊙ g where beta is None: 2 map programs forward (1
    with given sums, or the one-pass kernel), 2 backward (or the one-pass kernel)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, g: torch.Tensor, beta: torch.Tensor | None, eps: float,
                rowsum: torch.Tensor | None, sumsq: torch.Tensor | None, passthrough: bool = False):
        ctx.set_materialize_grads(False)
        rows, _ = as_rows(x)
        rms, shifted = beta is None, sumsq is None
        if shifted and layer_norm_one_pass(rows, rows):
            from . import layer_norm_forward  # Triton, imported on first use

            y, rowsum, sumsq = layer_norm_forward.launch(rows, g, beta, eps)
        else:
            if shifted and rms:
                sumsq = RMS_STATS.map(rows, outputs=["ss"])["ss"]
            elif shifted:
                sums = LN_STATS.map(rows, shift=row_shift(rows, True), outputs=["s", "ss"])
                rowsum, sumsq = sums["s"], sums["ss"]
            row = row_operands(rows, rowsum, sumsq, eps, shifted)
            y = (RMS_NORM.map(rows, **row, g=g) if rms else
                 LAYER_NORM.map(rows, **row, g=g, beta=beta))["output"]
        ctx.save_for_backward(x, g, sumsq.reshape(-1), *(() if rms else (rowsum.reshape(-1),)))
        ctx.eps, ctx.shifted, ctx.beta_dtype = eps, shifted, None if rms else beta.dtype
        y = y.reshape(x.shape)
        return (y, x) if passthrough else y

    @staticmethod
    def backward(ctx, dy: torch.Tensor | None, dres: torch.Tensor | None = None):
        x, g, ss, *s = ctx.saved_tensors
        rms = not s
        need_x, need_g, need_beta = ctx.needs_input_grad[:3]
        if dy is None:   # only the passed-through x was used
            return dres, None, None, None, None, None, None
        rows, dy = as_rows(x)[0], as_rows(dy)[0]
        row = row_operands(rows, None if rms else s[0], ss, ctx.eps, ctx.shifted)
        dres = None if dres is None else as_rows(dres)[0]
        if layer_norm_one_pass(dy, rows):
            from . import layer_norm_grad  # Triton, imported on first use

            params = (g.dtype, ctx.beta_dtype)[:1 if rms else 2] if need_g or need_beta else None
            note = need_x and notes_from(ctx, x)   # for the op that produced x: its bias gradient
            dx, dg, dbeta, _, dx_sums = layer_norm_grad.launch(
                dy, rows, g, **row, dres=dres, need_dx=need_x, param_dtypes=params,
                sum_dx=g.dtype if note else None)
            dx = dx.reshape(x.shape) if need_x else None
            if note:
                note_column_sums(dx, dx_sums)
            return dx, dg if need_g else None, dbeta if need_beta else None, None, None, None, None
        sums_prog, dx_progs = (RMS_GRAD_SUMS, RMS_GRAD_DX) if rms else (LN_GRAD_SUMS, LN_GRAD_DX)
        row_sums = ["b"] if rms else ["a", "b"]
        wanted = row_sums * need_x + ["dg"] * need_g + ["dbeta"] * need_beta
        dtypes = {"dg": g.dtype} | ({} if rms else {"dbeta": ctx.beta_dtype})
        sums = sums_prog.map(dy, **row, g=g, xin=rows, outputs=wanted, dtypes=dtypes) if wanted else {}
        dx = None
        if need_x:
            dx = dx_progs[dres is not None].map(dy, **row, g=g, xin=rows, **{k: sums[k] for k in row_sums},
                                                **residual_grad(dres))["output"]
            dx = dx.reshape(x.shape)
        return dx, sums.get("dg"), sums.get("dbeta"), None, None, None, None


@follows_autocast("rowsum", "sumsq", widest=True)
def layer_norm(x: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, eps: float = 1e-5,
               rowsum: torch.Tensor | None = None, sumsq: torch.Tensor | None = None,
               passthrough: bool = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """`torch.nn.functional.layer_norm(x, (n,), g, beta, eps)` as CODA programs.

    x: [..., n]; g, beta: [n]. `rowsum` and `sumsq` are the per-row Σ x and Σ x² (shape x.shape[:-1],
    float32) when the producer of x computed them (out_proj_residual(..., stats="layer")); give
    both or neither. Returns y in x's dtype, or (y, x) with `passthrough=True`: x to use
    downstream in place of the argument (a pre-norm block's residual), whose gradient then joins
    x's gradient inside the backward's dx kernel instead of in a separate add.
    """
    _check("layer_norm", x, dict(g=g, beta=beta), dict(rowsum=rowsum, sumsq=sumsq), passthrough)
    eps = checks.eps("layer_norm", eps)
    if (rowsum is None) != (sumsq is None):
        raise LaunchError("layer_norm: rowsum and sumsq come together; give both or neither")
    from ..integrations import compile as custom  # here: that module imports this one
    if custom.routed():   # inside torch.compile: the custom op coda::layer_norm, no graph break
        y = custom.layer_norm_op(x, g, beta, eps, rowsum, sumsq)
        return (y, x) if passthrough else y   # autograd adds the two gradients of x
    return NormFunction.apply(x, g, beta, eps, rowsum, sumsq, passthrough)


@follows_autocast("sumsq", widest=True)
def rms_norm(x: torch.Tensor, g: torch.Tensor, eps: float = 1e-6, sumsq: torch.Tensor | None = None,
             passthrough: bool = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """`torch.nn.functional.rms_norm(x, (n,), g, eps)` as CODA programs.

    x: [..., n]; g: [n]. `sumsq` is the per-row Σ x² (shape x.shape[:-1], float32) when the
    producer of x computed it (out_proj_residual(..., stats="rms")). Returns y in x's dtype, or
    (y, x) with `passthrough=True`, as `layer_norm` does.
    """
    _check("rms_norm", x, dict(g=g), dict(sumsq=sumsq), passthrough)
    eps = checks.eps("rms_norm", eps)
    from ..integrations import compile as custom  # here: that module imports this one
    if custom.routed():   # inside torch.compile: the custom op coda::rms_norm, no graph break
        y = custom.rms_norm_op(x, g, eps, sumsq)
        return (y, x) if passthrough else y   # autograd adds the two gradients of x
    return NormFunction.apply(x, g, None, eps, None, sumsq, passthrough)


def _check(op: str, x: object, params: dict[str, object], sums: dict[str, object], passthrough: object
           ) -> None:
    """A LaunchError naming the argument unless x is a floating-point [..., n] tensor, `params`
    are floating-point tensors [n] on its device and the given `sums` floating-point tensors of
    its leading shape there (an integer gain would pass one kernel and fail another)."""
    if not isinstance(x, torch.Tensor) or x.dim() == 0 or not x.is_floating_point():
        raise LaunchError(f"{op}: x must be a floating-point tensor [..., n], got {checks.describe(x)}")
    n = x.shape[-1]
    if n == 0:
        raise LaunchError(f"{op}: x has no features to normalize (its last dimension is 0)")
    for name, t in params.items():
        if not isinstance(t, torch.Tensor) or tuple(t.shape) != (n,) or t.device != x.device:
            raise LaunchError(f"{op}: {name} must be a tensor of shape [{n}] on {x.device}, got "
                              f"{checks.describe(t)}")
        checks.float_tensor(op, name, t)
    checks.flag("passthrough", passthrough)
    for name, t in sums.items():
        if t is None:
            continue
        checks.row_sums(op, name, t, x)
        if tuple(t.shape) != tuple(x.shape[:-1]):
            raise LaunchError(f"{op}: {name} must be a tensor of shape {list(x.shape[:-1])}, got "
                              f"{checks.describe(t)}")
