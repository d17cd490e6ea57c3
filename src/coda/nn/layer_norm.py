"""LayerNorm as CODA map programs, for the norms no GEMM can absorb.

In GPT-2, ln_1 folds into the QKV GEMM (`coda.ops.norms.layer_norm_linear`), but ln_2 feeds
`coda.ops.mlp`, whose fc1 takes a plain input, and ln_f feeds `linear_cross_entropy`, which folds
only an RMSNorm: those two run here. x is [..., n] (viewed as rows [M, n]); g, beta are [n].

    y = xhat ⊙ g + beta,   xhat = (x - mean) rstd,   mean = Σ x / n,   rstd = rsqrt(var + eps)

forward   s, ss         = LN_STATS.map(x): shifted row sums (coda.ops.norms), skipped when the
                          producer of x summed them (out_proj_residual(..., stats="layer"))
          y             = LAYER_NORM.map(x): mean and rstd per row from the sums, then the affine map
          Without given sums, where the Triton backend runs and a row has at most ONE_PASS_MAX_N
          values, the forward is instead one hand-written pass over whole rows
          (coda.nn.layer_norm_forward) that forms the sums and y: x is read once.
backward  (dxhat = dy ⊙ g)
          a, b, dg, dβ  = LN_GRAD_SUMS.map(dy): a = Σ_k dxhat, b = Σ_k dxhat xhat per row,
                          dg = Σ_m dy xhat, dβ = Σ_m dy per column (no tile is written)
          dx            = LN_GRAD_DX.map(dy): rstd (dxhat - (a + xhat b) / n)
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
from ..ops.common import as_rows, follows_autocast, note_column_sums, notes_from
from ..ops.norms import LN_ROW, LN_ROW_PARAMS, LN_STATS, layer_norm_one_pass, residual_grad, row_shift

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


class LayerNormFunction(torch.autograd.Function):
    """LayerNorm(x) ⊙ g + beta: 2 map programs forward (1 with given sums), 2 backward."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, eps: float,
                rowsum: torch.Tensor | None, sumsq: torch.Tensor | None, passthrough: bool = False):
        ctx.set_materialize_grads(False)
        rows, _ = as_rows(x)
        shift = row_shift(rows, rowsum is None)
        if rowsum is None and layer_norm_one_pass(rows, rows):
            from . import layer_norm_forward  # Triton, imported on first use

            y, rowsum, sumsq = layer_norm_forward.launch(rows, g, beta, eps)
        else:
            if rowsum is None:
                sums = LN_STATS.map(rows, shift=shift, outputs=["s", "ss"])
                rowsum, sumsq = sums["s"], sums["ss"]
            y = LAYER_NORM.map(rows, shift=shift, s=rowsum.reshape(-1), ss=sumsq.reshape(-1),
                               inv_n=1.0 / rows.shape[1], eps=eps, g=g, beta=beta)["output"]
        ctx.save_for_backward(x, g, shift, rowsum.reshape(-1), sumsq.reshape(-1))
        ctx.eps, ctx.beta_dtype = eps, beta.dtype
        y = y.reshape(x.shape)
        return (y, x) if passthrough else y

    @staticmethod
    def backward(ctx, dy: torch.Tensor | None, dres: torch.Tensor | None = None):
        x, g, shift, s, ss = ctx.saved_tensors
        need_x, need_g, need_beta = ctx.needs_input_grad[:3]
        if dy is None:   # only the passed-through x was used
            return dres, None, None, None, None, None, None
        rows, dy = as_rows(x)[0], as_rows(dy)[0]
        row = dict(shift=shift, s=s, ss=ss, inv_n=1.0 / rows.shape[1], eps=ctx.eps)
        if layer_norm_one_pass(dy, rows):
            from . import layer_norm_grad  # Triton, imported on first use

            params = (g.dtype, ctx.beta_dtype) if need_g or need_beta else None
            note = need_x and notes_from(ctx)   # for the op that produced x: its bias gradient
            dx, dg, dbeta, _, dx_sums = layer_norm_grad.launch(
                dy, rows, g, **row, dres=as_rows(dres)[0] if dres is not None else None, need_dx=need_x,
                param_dtypes=params, sum_dx=g.dtype if note else None)
            dx = dx.reshape(x.shape) if need_x else None
            if note:
                note_column_sums(dx, dx_sums)
            return dx, dg if need_g else None, dbeta if need_beta else None, None, None, None, None
        wanted = ["a", "b"] * need_x + ["dg"] * need_g + ["dbeta"] * need_beta
        sums = LN_GRAD_SUMS.map(dy, **row, g=g, xin=rows, outputs=wanted,
                                dtypes={"dg": g.dtype, "dbeta": ctx.beta_dtype}) if wanted else {}
        dx = dg = dbeta = None
        if need_x:
            dx = LN_GRAD_DX[dres is not None].map(dy, **row, g=g, xin=rows, a=sums["a"], b=sums["b"],
                                                  **residual_grad(dres))["output"]
            dx = dx.reshape(x.shape)
        if need_g:
            dg = sums["dg"]
        if need_beta:
            dbeta = sums["dbeta"]
        return dx, dg, dbeta, None, None, None, None


@follows_autocast("rowsum", "sumsq", widest=True)
def layer_norm(x: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, eps: float = 1e-5,
               rowsum: torch.Tensor | None = None, sumsq: torch.Tensor | None = None,
               passthrough: bool = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """`torch.nn.functional.layer_norm(x, (n,), g, beta, eps)` as CODA map programs.

    x: [..., n]; g, beta: [n]. `rowsum` and `sumsq` are the per-row Σ x and Σ x² (shape x.shape[:-1],
    float32) when the producer of x computed them (out_proj_residual(..., stats="layer")); give
    both or neither. Returns y in x's dtype, or (y, x) with `passthrough=True`: x to use
    downstream in place of the argument (a pre-norm block's residual), whose gradient then joins
    x's gradient inside the backward's dx map instead of in a separate add.
    """
    if not isinstance(x, torch.Tensor) or x.dim() == 0 or not x.is_floating_point():
        raise LaunchError("layer_norm: x must be a floating-point tensor [..., n]")
    n = x.shape[-1]
    for name, t in (("g", g), ("beta", beta)):
        if not isinstance(t, torch.Tensor) or tuple(t.shape) != (n,) or t.device != x.device:
            raise LaunchError(f"layer_norm: {name} must be a tensor of shape [{n}] on {x.device}")
    if (rowsum is None) != (sumsq is None):
        raise LaunchError("layer_norm: rowsum and sumsq come together; give both or neither")
    checks.flag("passthrough", passthrough)
    for name, t in (("rowsum", rowsum), ("sumsq", sumsq)):
        if t is not None and tuple(t.shape) != tuple(x.shape[:-1]):
            raise LaunchError(f"layer_norm: {name} must have shape {list(x.shape[:-1])}, got "
                              f"{list(t.shape)}")
    from ..integrations import compile as custom  # here: that module imports this one
    if custom.routed():   # inside torch.compile: the custom op coda::layer_norm, no graph break
        y = custom.layer_norm_op(x, g, beta, float(eps), rowsum, sumsq)
        return (y, x) if passthrough else y   # autograd adds the two gradients of x
    return LayerNormFunction.apply(x, g, beta, float(eps), rowsum, sumsq, passthrough)
