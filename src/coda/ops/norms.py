"""Norm-folded linear layers, and the out projection whose epilogue feeds them their statistics.

x is [..., K] (viewed as rows [M, K], n = K the hidden size); w has nn.Linear's layout [N, K];
g, beta are [K]; bias is [N]. ⊙_row scales each row, W' = w ⊙ g[None, :] is the folded weight.

rms_norm_linear(x, g, w, eps, bias, sumsq):
    y = RMSNorm(x) @ w.T + bias = rstd ⊙_row (x @ W'.T) + bias,   rstd = rsqrt(ss / n + eps),
    ss = Σ_k x_k² per row (given as `sumsq` by the producer of x, e.g. out_proj_residual)
  Without sumsq, on the Triton backend and rows of up to ONE_PASS_MAX_N values: RMSNorm's
  one-pass forward (coda.nn.rms_norm) and then `linear`, as layer_norm_linear below; else the fold:
  forward   ss            = RMS_STATS.map(x)           (only without sumsq)
            W'            = FOLD.map(w)                 g is a col operand of w
            y             = RMS_LINEAR  GEMM x @ W'.T; epilogue: * rsqrt(ss / n + eps) + bias
  backward  (dln = dy @ w, the gradient at the norm's output; dxhat = dln * g = dy @ W',
            xhat = x rstd, t = Σ_k dxhat ⊙ x = Σ_j dy ⊙ (x @ W'.T))
    on the Triton backend, rows of up to ONE_PASS_MAX_N values (and dx wanted), as LayerNorm's:
            dln           = dy @ w: cuBLAS; with a bias PLAIN GEMM, db = Σ_rows dy from its K loop
                            (`a_col_sums=True`)
            dx, dg, xn    = coda.nn.layer_norm_grad (RMS): one pass over whole rows,
                            dx = rstd (dxhat − xhat Σ_k dxhat xhat / n), dg = Σ_m dln xhat,
                            xn = xhat g (the norm's output)
            dw            = dy.T @ xn: cuBLAS (PLAIN GEMM where dy is a Concat)
    elsewhere (the reference backend, wider rows; RMS_LINEAR[False].map(x) for xn without dx):
            dxhat, t      = RMS_DXHAT  GEMM dy @ w; epilogue: * g, t = row_sum(dxhat * x)
            dx, xn        = RMS_DX.map(dxhat): rstd dxhat − (rstd³ / n) t x,  save xn = rstd x
            dw, dg        = NORM_DW  GEMM dy.T @ xn (= dW'); epilogue: dw = dW' * g,
                            dg = col_sum(dW' * w)
            db            = column_sum(dy)            (with bias; SUMS.map(dy): col_sum)
  The rstd term of dx is the derivative through rstd(x), so sumsq is not differentiated: it must
  be Σ x² of this x, and x's gradient then carries everything.

layer_norm_linear(x, g, beta, w, bias, eps, rowsum, sumsq):
    y = LayerNorm(x) @ w.T + bias = rstd ⊙_row (x @ W'.T − mean ⊗ u) + cv,
    u_n = Σ_k W'_nk,  cv = w @ beta + bias,  mean and rstd from shifted row sums:
    s = Σ_k (x_k − c), ss = Σ_k (x_k − c)²,  mean = c + s / n,  var = ss / n − (s / n)²
  The shift c is x[:, 0] for the statistics computed here (one pass, and no cancellation when
  |mean| >> std), 0 for `rowsum` / `sumsq` given by the producer (raw sums: see docs/ops/norms.md);
  as for RMSNorm, given sums are not differentiated: the backward differentiates mean(x), rstd(x).
  Without rowsum / sumsq, on the Triton backend, rows of up to ONE_PASS_MAX_N values and no
  `split`: LayerNorm's one-pass forward (coda.nn.layer_norm) and then `linear`, not the fold
  below (fewer kernels and less time: `_norm_then_linear`).
  forward   s, ss         = LN_STATS.map(x)            (only without rowsum / sumsq)
            W', cv, u     = FOLD_LN.map(w): W' = w * g, cv = row_sum(w * beta),
                            u = row_sum(W' rounded to w's dtype): Σ_k of the W' the GEMM reads
            y             = LN_LINEAR  GEMM x @ W'.T; epilogue: rstd (input − mean u) + cv + bias
  backward  (dln = dy @ w, the gradient at the norm's output; dxhat = dln * g = dy @ W',
            xhat = (x − mean) rstd; a = Σ_k dxhat, b = Σ_k dxhat xhat per row)
    on the Triton backend, rows of up to ONE_PASS_MAX_N values (and dx wanted):
            dln           = PLAIN  GEMM dy @ w; db = Σ_rows dy from its K loop (`a_col_sums=True`);
                            cuBLAS where there is no bias and dy is one tensor, and with db
                            as SUMS.map(dy) from N = common.SUMS_IN_GEMM_MAX_K on
            dx, dg, dbeta, xn = coda.nn.layer_norm_grad: one pass over whole rows, a and b
                            complete in the program, dx = rstd (dxhat − (a + xhat b) / n),
                            dg = Σ_m dln xhat, dbeta = Σ_m dln, xn = xhat g + beta (the norm's output),
                            and dx's column sums, noted for the op that produced x (its bias
                            gradient: common.known_column_sums)
            dw            = PLAIN  GEMM dy.T @ xn (cuBLAS where dy is one tensor)
    elsewhere (the reference backend, wider rows; LN_XHAT.map(x) for xhat without dx):
            dxhat, a, b   = LN_DXHAT  GEMM dy @ w; epilogue: * g, a = row_sum(dxhat),
                            b = row_sum(dxhat * xhat); db = Σ_rows dy from its K loop
                            (`a_col_sums=True`; column_sum(dy) when dx is not wanted)
            dx, xhat      = LN_DX.map(dxhat): rstd (dxhat − (a + xhat b) / n),  save xhat
            dw, dg, dbeta = LN_DW  GEMM dy.T @ xhat; epilogue: dw = input * g + db ⊗ beta,
                            dg = col_sum(input * w), dbeta = col_sum(db * w)
    The one-pass form keeps both GEMMs free of tile operands and sums (the dxhat GEMM's took
    GPT-2's c_attn backward 1.32× cuBLAS's time, its dw GEMM's 1.21×: docs/benchmarks-log.md).

out_proj_residual(x, w, residual, bias, dropout_p, seed, stats):
    y = residual + dropout(x @ w.T + bias),  with ss = Σ y² (stats "rms"; also s = Σ y for "layer")
  forward   y, [ss, s]    = linear.forward_program  GEMM x @ w.T; epilogue: + bias, dropout, + residual,
                            ss = row_sum(output * output), s = row_sum(output)
  backward  dpre, db      = DROPOUT_GRAD.map(dy): dropout(dy, p), db = col_sum   (with dropout;
                            without, dpre = dy: db is the column sums a LayerNorm after the
                            op noted for dy (common.known_column_sums, dx then cuBLAS's GEMM),
                            else dx's GEMM, CODA's, sums dy's columns from its K loop,
                            `a_col_sums=True`)
            dx, dw        = dpre @ w, dpre.T @ x;   dresidual = dy
  ss and s are statistics, not differentiated: the consumer's backward differentiates through
  its own rstd(x) (see above), so out_proj_residual -> rms_norm_linear(sumsq=ss) is exact.

Row statistics (rstd, mean) are never materialized: every epilogue that needs them recomputes
them per row from the [M] sums (a few flops per row), so no O(M) glue kernels run. The folded
weight W' is recomputed per call (one map over w, 4NK bytes) and never saved: the backward
applies g in epilogues instead (docs/ops/norms.md explains why it is not cached). Launches name
the outputs they need (`outputs=`): a map that only sums never stores its `output`, and no
gradient that no input needs is stored.
"""

from __future__ import annotations

import math
import numbers

import torch

from .. import compile as compile_program
from ..errors import LaunchError
from ..runtime.binding import Concat
from ..runtime.program import default_backend
from . import checks
from .common import (
    PLAIN,
    ROUNDING,
    SCALE_ROWS,
    STATS,
    as_rows,
    check_split,
    column_sum,
    device_constant,
    follows_autocast,
    input_and_bias_grad,
    joined_grad,
    known_column_sums,
    matmul,
    note_column_sums,
    notes_from,
    op_function,
    present,
    split_columns,
    stored,
    weight_grad,
    weight_grad_out,
    with_stats,
)
from .dropout import resolve_seed
from .linear import forward_program

# -- the statistics of each row, as DSL text spliced into the programs that need them -----------
RMS_ROW = "rstd = rsqrt(ss * inv_n + eps);"
LN_ROW = "m = s * inv_n; mean = shift + m; rstd = rsqrt(max(ss * inv_n - m * m, 0.0) + eps);"
RMS_ROW_PARAMS = "ss: row, inv_n: scalar, eps: scalar"
LN_ROW_PARAMS = "shift: row, s: row, ss: row, inv_n: scalar, eps: scalar"

#: the widest row LayerNorm's one-pass kernels hold in a program (coda.nn.layer_norm_grad,
#: layer_norm_forward); wider rows take the map programs
ONE_PASS_MAX_N = 4096

# -- maps: sums over a tensor that no CODA GEMM produced (launched with outputs= naming only the
#    sums, so `output` is never stored), and the weight folds (g, beta: [K], columns of w [N, K])
RMS_STATS = compile_program("EPILOGUE rms_stats() { output = input; ss = row_sum(input * input); }")
LN_STATS = compile_program("EPILOGUE ln_stats(shift: row) {"
                           " d = input - shift; output = d; s = row_sum(d); ss = row_sum(d * d); }")
FOLD = compile_program("EPILOGUE fold(g: col) { output = input * g; }")
# W' = w * g, cv = Σ_k w beta, and u = Σ_k of W' as stored (rounded to its dtype: ROUNDING), the
# values the forward GEMM reads: one map for the LayerNorm fold, keyed by that rounding
FOLD_LN = {rounding: compile_program(
    "EPILOGUE fold_ln(g: col, beta: col) { output = input * g; cv = row_sum(input * beta);"
    f" u = row_sum({f'{rounding}(output)' if rounding else 'output'}); }}")
    for rounding in (None, *ROUNDING.values())}

# -- forward GEMMs: x @ W'.T, the norm applied per row in the epilogue --------------------------
RMS_LINEAR = {bias: compile_program(
    f"EPILOGUE rms_linear({RMS_ROW_PARAMS}{', bias: col' * bias}) {{"
    f" {RMS_ROW} output = input * rstd{' + bias' * bias}; }}") for bias in (False, True)}
LN_LINEAR = {bias: compile_program(
    f"EPILOGUE ln_linear({LN_ROW_PARAMS}, u: col, cv: col{', bias: col' * bias}) {{"
    f" {LN_ROW} output = rstd * (input - mean * u) + cv{' + bias' * bias}; }}") for bias in (False, True)}

# -- RMSNorm backward ----------------------------------------------------------------------------
# dxhat = (dy @ w) * g = dy @ W';  t = Σ_k dxhat x = Σ_j dy (x @ W'.T), the gradient through rstd.
RMS_DXHAT = compile_program("EPILOGUE rms_dxhat(g: col, xin: tile) {"
                            " output = input * g; t = row_sum(output * xin); }")
# dx = rstd dxhat − (rstd³ / n) t x, and xn = rstd x, the B operand of the weight gradient
# (without dx, xn is RMS_LINEAR[False].map(x): the forward's epilogue is exactly that row scale).
# With `passthrough` (the op returns x for the block's residual) x's other gradient dres joins
# here: RMS_DX[True] and LN_DX[True] add it, where autograd would add the two in a third kernel.
RMS_DX = {res: compile_program(
    f"EPILOGUE rms_dx({RMS_ROW_PARAMS}, t: row, xin: tile{', dres: tile' * res}) {{ {RMS_ROW}"
    f" save xn = rstd * xin; output = rstd * (input - rstd * rstd * t * inv_n * xin){' + dres' * res}; }}")
    for res in (False, True)}
# dW' = dy.T @ xn: dw = dW' * g (g is a column of [N, K]) and dg = Σ_n dW' w.
NORM_DW = compile_program("EPILOGUE norm_dw(g: col, w: tile) {"
                          " output = input * g; dg = col_sum(input * w); }")

# -- LayerNorm backward --------------------------------------------------------------------------
# dxhat = (dy @ w) * g;  a = Σ_k dxhat, b = Σ_k dxhat xhat.
LN_DXHAT = compile_program(f"EPILOGUE ln_dxhat({LN_ROW_PARAMS}, g: col, xin: tile) {{ {LN_ROW}"
                           " output = input * g; a = row_sum(output);"
                           " b = row_sum(output * (xin - mean) * rstd); }")
# dx = rstd (dxhat − (a + xhat b) / n), and xhat, the B operand of the weight gradient.
LN_DX = {res: compile_program(
    f"EPILOGUE ln_dx({LN_ROW_PARAMS}, a: row, b: row, xin: tile{', dres: tile' * res}) {{ {LN_ROW}"
    f" save xhat = (xin - mean) * rstd;"
    f" output = rstd * (input - (a + xhat * b) * inv_n){' + dres' * res}; }}")
    for res in (False, True)}
LN_XHAT = compile_program(f"EPILOGUE ln_xhat({LN_ROW_PARAMS}) {{ {LN_ROW} output = (input - mean) * rstd; }}")
# dy.T @ xhat: dw = input * g + db ⊗ beta, dg = Σ_n input w, dbeta = Σ_n db w (db is a row of [N, K]).
LN_DW = compile_program("EPILOGUE ln_dw(g: col, beta: col, db: row, w: tile) {"
                        " output = input * g + db * beta; dg = col_sum(input * w);"
                        " dbeta = col_sum(db * w); }")

# -- out projection backward: the dropout derivative is the same mask (same seed) --------------
DROPOUT_GRAD = compile_program("EPILOGUE dropout_grad(p: scalar) {"
                               " output = dropout(input, p); db = col_sum(output); }")


def row_shift(rows: torch.Tensor, shifted: bool) -> torch.Tensor:
    """The shift c of LayerNorm's row sums: each row's first value (|mean - c| is then about one
    std, so var = ss / n - (s / n)² does not cancel), or 0 for raw sums from a producer (a
    stride-0 view of one cached zero: no fill kernel per call)."""
    return rows[:, 0] if shifted else _zero(rows.device, rows.dtype).expand(rows.shape[0])


def _zero(device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """One zero per device and dtype, never written (`device_constant`)."""
    return device_constant(("zero", device, dtype), lambda: torch.zeros((), device=device, dtype=dtype))


def residual_grad(dres: torch.Tensor | None) -> dict[str, torch.Tensor]:
    """The `dres` operand of a dx map: the gradient of the passed-through x, as rows."""
    return {} if dres is None else {"dres": as_rows(dres)[0]}


def _wanted(**flags: bool) -> list[str]:
    """The outputs= of a launch: the names whose flag is set (the others are never stored)."""
    return [name for name, wanted in flags.items() if wanted]



# ------------------------------------------------------------------------------------------------
@op_function
class RMSNormLinearFunction(torch.autograd.Function):
    """rstd ⊙_row (x @ W'.T) + bias: 2 CODA kernels forward (3 without sumsq); backward, on the
    Triton backend two plain GEMMs around RMSNorm's one-pass backward, else 3 (4 with bias)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, g: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None,
                sumsq: torch.Tensor | None, eps: float, passthrough: bool = False):
        ctx.set_materialize_grads(False)
        rows, lead = as_rows(x)
        row, folded = rms_fold(rows, g, w, sumsq, eps)
        y = RMS_LINEAR[bias is not None](rows, folded.T, **row, **present(bias=bias))["output"]
        ctx.save_for_backward(x, g, w, row["ss"])
        ctx.eps, ctx.bias_dtype = eps, None if bias is None else bias.dtype
        y = y.reshape(*lead, w.shape[0])
        return (y, x) if passthrough else y

    @staticmethod
    def backward(ctx, dy: torch.Tensor | None, dres: torch.Tensor | None = None):
        x, g, w, ss = ctx.saved_tensors
        if dy is None:   # only the passed-through x was used
            return dres, None, None, None, None, None, None
        grads = rms_norm_linear_grads(as_rows(dy)[0], x, g, w, ss, ctx.eps, ctx.needs_input_grad[:4],
                                      dres, ctx.bias_dtype, notes_from(ctx, x))
        return *grads, None, None, None


def rms_fold(rows: torch.Tensor, g: torch.Tensor, w: torch.Tensor, sumsq: torch.Tensor | None,
             eps: float) -> tuple[dict, torch.Tensor]:
    """The forward's norm operands: the row operands of RMS_ROW (ss computed here unless the
    producer of x gave it) and the folded weight W' = w ⊙ g."""
    ss = RMS_STATS.map(rows, outputs=["ss"])["ss"] if sumsq is None else sumsq.reshape(-1)
    return dict(ss=ss, inv_n=1.0 / rows.shape[1], eps=eps), FOLD.map(w, g=g)["output"]


def rms_norm_linear_grads(dy: torch.Tensor, x: torch.Tensor, g: torch.Tensor, w: torch.Tensor,
                          ss: torch.Tensor, eps: float, needs: tuple[bool, ...],
                          dres: torch.Tensor | None = None, bias_dtype: torch.dtype | None = None,
                          note: bool = False) -> tuple[torch.Tensor | None, ...]:
    """(dx, dg, dw, db) of y = RMSNorm(x; g) @ w.T + b from dy [M, N] (rows), each None unless
    `needs` (x, g, w, bias) asks for it; dres, the passed-through x's gradient, joins dx. With
    dx, on the Triton backend and rows of up to ONE_PASS_MAX_N values: the one-pass form
    (norm_linear_grads; `note` as there), else the fold's kernels."""
    need_x, need_g, need_w, need_b = needs
    rows = as_rows(x)[0]
    row = dict(ss=ss, inv_n=1.0 / rows.shape[1], eps=eps)
    if need_x and layer_norm_one_pass(dy, rows):
        dx, dg, _, dw, db = norm_linear_grads(dy, rows, g, None, w, row, dres,
                                              (need_g, False, need_w, need_b), bias_dtype, x.shape, note)
        return dx, dg, dw, db
    dx = dg = dw = db = None
    if need_x:
        pre = RMS_DXHAT(dy, w, g=g, xin=rows)
        outs = RMS_DX[dres is not None].map(pre["output"], **row, t=pre["t"], xin=rows,
                                            **residual_grad(dres),
                                            outputs=_wanted(output=True, xn=need_g or need_w))
        dx, xn = outs["output"].reshape(x.shape), outs.get("xn")
    elif need_g or need_w:
        xn = RMS_LINEAR[False].map(rows, **row)["output"]
    if need_g or need_w:
        outs = NORM_DW(dy.T, xn, g=g, w=w, out=weight_grad_out(w) if need_w else None,
                       outputs=_wanted(output=need_w, dg=need_g),
                       dtypes=stored(output=w.dtype, dg=g.dtype))
        dw, dg = outs.get("output"), outs.get("dg")
    if need_b:
        db = column_sum(dy, bias_dtype)
    return dx, dg, dw, db


@op_function
class LayerNormLinearFunction(torch.autograd.Function):
    """rstd ⊙_row (x @ W'.T − mean ⊗ u) + cv: 2 CODA kernels forward (3 without rowsum/sumsq,
    where `layer_norm_linear` does not take `_norm_then_linear`), 4 backward. With `split`
    (column widths) the output is returned in column blocks, and the backward GEMMs read the
    blocks' gradients in place (common.joined_grad)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, w: torch.Tensor,
                bias: torch.Tensor | None, eps: float, rowsum: torch.Tensor | None,
                sumsq: torch.Tensor | None, passthrough: bool = False,
                split: tuple[int, ...] | None = None):
        ctx.set_materialize_grads(False)
        rows, lead = as_rows(x)
        shift = row_shift(rows, rowsum is None)
        if rowsum is None:
            stats = LN_STATS.map(rows, shift=shift, outputs=["s", "ss"])
            s, ss = stats["s"], stats["ss"]
        else:
            s, ss = rowsum.reshape(-1), sumsq.reshape(-1)
        fold = FOLD_LN[ROUNDING.get(w.dtype)].map(w, g=g, beta=beta)
        folded, u = fold["output"], fold["u"]
        row = dict(shift=shift, s=s, ss=ss, inv_n=1.0 / rows.shape[1], eps=eps)
        prog = LN_LINEAR[bias is not None]
        y = prog(rows, folded.T, **row, u=u, cv=fold["cv"], **present(bias=bias))["output"]
        ctx.save_for_backward(x, g, beta, w, s, ss)
        ctx.eps, ctx.shifted, ctx.split = eps, rowsum is None, split
        ctx.bias_dtype = None if bias is None else bias.dtype
        y = split_columns(y.reshape(*lead, w.shape[0]), split)
        return (*y, x) if passthrough else y if split else y[0]

    @staticmethod
    def backward(ctx, *grads: torch.Tensor | None):
        x, g, beta, w, s, ss = ctx.saved_tensors
        need_x, need_g, need_beta, need_w, need_b = ctx.needs_input_grad[:5]
        blocks = len(ctx.split or (0,))
        rows = as_rows(x)[0]
        dy = joined_grad(grads[:blocks], ctx.split, rows.shape[0], rows)
        dres = grads[blocks] if len(grads) > blocks else None
        if dy is None:   # only the passed-through x was used
            return dres, *[None] * 9
        need_weights = need_g or need_beta or need_w
        row = dict(shift=row_shift(rows, ctx.shifted), s=s, ss=ss, inv_n=1.0 / rows.shape[1], eps=ctx.eps)
        if need_x and layer_norm_one_pass(dy, rows):
            dx, dg, dbeta, dw, db = norm_linear_grads(dy, rows, g, beta, w, row, dres,
                                                      (need_g, need_beta, need_w, need_b),
                                                      ctx.bias_dtype, x.shape, notes_from(ctx, x))
            return dx, dg, dbeta, dw, db, None, None, None, None, None
        dx = dg = dbeta = dw = db = None
        # the bias gradient (float32 while LN_DW reads it, else the bias's dtype): the column
        # sums of dy, which dxhat's GEMM takes from its K loop when it runs
        need_db = need_weights or need_b
        db_dtype = None if need_weights else ctx.bias_dtype
        if need_x:
            pre = LN_DXHAT(dy, w, **row, g=g, xin=rows, a_col_sums=need_db,
                           dtypes=stored(a_col_sums=db_dtype if need_db else None))
            db = pre.get("a_col_sums")
            outs = LN_DX[dres is not None].map(pre["output"], **row, a=pre["a"], b=pre["b"], xin=rows,
                                               **residual_grad(dres),
                                               outputs=_wanted(output=True, xhat=need_weights))
            dx, xhat = outs["output"].reshape(x.shape), outs.get("xhat")
        elif need_weights:
            xhat = LN_XHAT.map(rows, **row)["output"]
        if need_db and db is None:
            db = column_sum(dy, db_dtype)
        if need_weights:
            outs = LN_DW(dy.T, xhat, g=g, beta=beta, db=db, w=w, out=weight_grad_out(w) if need_w else None,
                         outputs=_wanted(output=need_w, dg=need_g, dbeta=need_beta),
                         dtypes=stored(output=w.dtype, dg=g.dtype, dbeta=beta.dtype))
            dw, dg, dbeta = outs.get("output"), outs.get("dg"), outs.get("dbeta")
        db = db.to(ctx.bias_dtype) if need_b else None
        return dx, dg, dbeta, dw, db, None, None, None, None, None


def layer_norm_one_pass(t: torch.Tensor | Concat, rows: torch.Tensor) -> bool:
    """Whether LayerNorm over `rows` runs as a hand-written pass holding whole rows (the backward's
    coda.nn.layer_norm_grad, the forward's layer_norm_forward): where `t`, the tensor the pass
    reads (a Concat's pieces), takes the Triton backend and a row has at most ONE_PASS_MAX_N values."""
    first = t.pieces[0] if isinstance(t, Concat) else t
    return default_backend(first) == "triton" and rows.shape[1] <= ONE_PASS_MAX_N


def norm_linear_grads(dy: torch.Tensor | Concat, rows: torch.Tensor, g: torch.Tensor,
                      beta: torch.Tensor | None, w: torch.Tensor, row: dict, dres: torch.Tensor | None,
                      needs: tuple[bool, bool, bool, bool], bias_dtype: torch.dtype | None,
                      x_shape: torch.Size, note: bool) -> tuple[torch.Tensor | None, ...]:
    """(dx, dg, dbeta, dw, db) of layer_norm_linear, or of rms_norm_linear where `beta` is None
    (dbeta then None), where dx (of shape `x_shape`) is wanted, in the one-pass form (module
    docstring), each of the others None unless `needs` (g, beta, w, bias) asks for it; with
    `note`, dx's column sums are noted for the op that produced x (a residual stream's last GEMM
    takes them as its bias gradient: common.known_column_sums). dy: [M, N] rows, or a Concat of
    column blocks (`split=`); row: LN_ROW's operands, or RMS_ROW's."""
    from ..nn import layer_norm_grad  # Triton, imported on first use

    need_g, need_beta, need_w, need_b = needs
    gathered = isinstance(dy, Concat)   # column blocks read in place: CODA's GEMMs
    if gathered:
        outs = PLAIN(dy, w, a_col_sums=need_b, dtypes=stored(a_col_sums=bias_dtype if need_b else None))
        dln, db = outs["output"], outs.get("a_col_sums")
    else:
        dln, db = input_and_bias_grad(dy, w, True, bias_dtype if need_b else None)
    params = (g.dtype, *(() if beta is None else (beta.dtype,))) if need_g or need_beta else None
    dx, dg, dbeta, xn, dx_sums = layer_norm_grad.launch(dln, rows, g, **row,
                                                        dres=None if dres is None else as_rows(dres)[0],
                                                        need_dx=True, param_dtypes=params, save_xn=need_w,
                                                        beta=beta, sum_dx=g.dtype if note else None)
    dx = dx.reshape(x_shape)
    if note:
        note_column_sums(dx, dx_sums)
    dw = None
    if need_w:
        dw = (PLAIN(dy.T, xn, out=weight_grad_out(w), dtypes=stored(output=w.dtype))["output"] if gathered
              else weight_grad(dy, xn, like=w))
    return dx, dg if need_g else None, dbeta if need_beta else None, dw, db


@op_function
class OutProjResidualFunction(torch.autograd.Function):
    """residual + dropout(x @ w.T + bias) and its row sums: 1 CODA kernel forward, 2 backward
    (3 with dropout, or with bias)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, w: torch.Tensor, residual: torch.Tensor,
                bias: torch.Tensor | None, p: float, seed: int | None, stats: str | None):
        ctx.set_materialize_grads(False)   # no zero tensors for the row sums' gradients
        rows, lead = as_rows(x)
        prog = forward_program(None, bias is not None, p > 0.0, True, False, x.dtype if stats else None)
        outs = prog(rows, w.T, residual=as_rows(residual, "residual")[0], seed=seed,
                    outputs=["output", *STATS[stats]], **present(bias=bias, p=p or None))
        y = outs["output"].reshape(*lead, w.shape[0])
        ctx.save_for_backward(x, w)
        ctx.p, ctx.seed = p, seed
        ctx.dtypes = residual.dtype, None if bias is None else bias.dtype
        return with_stats(ctx, y, outs, stats, lead)

    @staticmethod
    def backward(ctx, dy: torch.Tensor | None, *unused_stat_grads):
        if dy is None:   # only the row sums were used
            return (None,) * 7
        x, w = ctx.saved_tensors
        need_x, need_w, need_r, need_b = ctx.needs_input_grad[:4]
        residual_dtype, bias_dtype = ctx.dtypes
        dpre = as_rows(dy)[0]
        if ctx.p > 0.0:
            outs = DROPOUT_GRAD.map(dpre, p=ctx.p, seed=ctx.seed, outputs=_wanted(output=True, db=need_b),
                                    dtypes=stored(db=bias_dtype))
            dpre, db = outs["output"], outs.get("db")
            dx = matmul(dpre, w) if need_x else None
        else:   # dpre is dy, whose column sums the norm after this op may have formed
            dx, db = input_and_bias_grad(dpre, w, need_x, bias_dtype if need_b else None,
                                         known_column_sums(dy, bias_dtype) if need_b else None)
        dx = None if dx is None else dx.reshape(x.shape)
        dw = weight_grad(dpre, as_rows(x)[0], like=w).to(w.dtype) if need_w else None
        dresidual = dy.to(residual_dtype) if need_r else None
        return dx, dw, dresidual, db, None, None, None


# -- the functional ops --------------------------------------------------------------------------
@follows_autocast("sumsq")
def rms_norm_linear(x: torch.Tensor, g: torch.Tensor, w: torch.Tensor, eps: float = 1e-6,
                    bias: torch.Tensor | None = None, sumsq: torch.Tensor | None = None,
                    passthrough: bool = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """RMSNorm(x; g, eps) @ w.T (+ bias), the norm folded into the GEMM (see the module docstring).

    x: [..., K]; g: [K]; w: [N, K] with x's dtype; bias: [N]; sumsq: the float32 per-row Σ x²
    ([...] or [M]) when the producer of x computed it (out_proj_residual(..., stats="rms")).
    Without it the Triton backend runs RMSNorm's one-pass forward and then the linear layer,
    which measured faster than the fold; elsewhere one map program computes it. Returns
    [..., N] in x's dtype; with
    `passthrough=True` (y, x), x to use downstream in place of the argument (a pre-norm
    block's residual): the gradient it gets joins x's gradient inside this op's dx kernel.
    """
    m, k, n = _check_linear("rms_norm_linear", x, w)
    checks.vector("rms_norm_linear", "g", g, k, x)
    _check_bias("rms_norm_linear", bias, n, x)
    checks.row_stats("rms_norm_linear", x, m, sumsq=sumsq)
    eps = checks.eps("rms_norm_linear", eps)
    passthrough = checks.flag("passthrough", passthrough)
    if sumsq is None and layer_norm_one_pass(x, as_rows(x)[0]):
        return _norm_then_linear(x, g, None, w, bias, eps, passthrough)   # under torch.compile too
    from ..integrations import compile as custom  # here: that module imports this one
    if custom.routed():   # inside torch.compile: the custom op coda::rms_norm_linear, no graph break
        y = custom.rms_norm_linear_op(x, g, w, bias, sumsq, eps)
        return (y, x) if passthrough else y   # autograd adds the two gradients of x
    return RMSNormLinearFunction.apply(x, g, w, bias, sumsq, eps, passthrough)


@follows_autocast("rowsum", "sumsq")
def layer_norm_linear(x: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, w: torch.Tensor,
                      bias: torch.Tensor | None = None, eps: float = 1e-5,
                      rowsum: torch.Tensor | None = None,
                      sumsq: torch.Tensor | None = None, passthrough: bool = False,
                      split: list[int] | tuple[int, ...] | None = None
                      ) -> torch.Tensor | tuple[torch.Tensor, ...]:
    """LayerNorm(x; g, beta, eps) @ w.T (+ bias), the norm folded into the GEMM.

    x: [..., K]; g, beta: [K]; w: [N, K] with x's dtype; bias: [N]. `rowsum` and `sumsq` are
    the float32 per-row Σ x and Σ x² ([...] or [M]) when the producer of x computed them
    (out_proj_residual(..., stats="layer")); give both or neither. Without them (and without
    `split`) the Triton backend runs LayerNorm's one-pass forward and then the linear layer,
    which measured faster than the fold; elsewhere one map program computes shifted sums,
    accurate also when |mean| >> std. Returns [..., N] in x's dtype, or
    (y, x) with `passthrough=True`, as rms_norm_linear does. `split`: column widths adding up to
    N; y is then returned as views of its column blocks (q, k and v of a fused projection), whose
    gradients the backward GEMMs read where they are (`coda.Concat`), with no concatenation.
    """
    m, k, n = _check_linear("layer_norm_linear", x, w)
    checks.vector("layer_norm_linear", "g", g, k, x)
    checks.vector("layer_norm_linear", "beta", beta, k, x)
    _check_bias("layer_norm_linear", bias, n, x)
    checks.row_stats("layer_norm_linear", x, m, rowsum=rowsum, sumsq=sumsq)
    if (rowsum is None) != (sumsq is None):
        missing = "sumsq" if sumsq is None else "rowsum"
        raise LaunchError(f"layer_norm_linear: rowsum and sumsq come together; {missing} is missing")
    eps = checks.eps("layer_norm_linear", eps)
    passthrough = checks.flag("passthrough", passthrough)
    split = check_split("layer_norm_linear", split, n)
    if rowsum is None and split is None and layer_norm_one_pass(x, as_rows(x)[0]):
        return _norm_then_linear(x, g, beta, w, bias, eps, passthrough)   # under torch.compile too
    from ..integrations import compile as custom  # here: that module imports this one
    if custom.routed():   # inside torch.compile: the custom op coda::layer_norm_linear, no graph break
        y = split_columns(custom.layer_norm_linear_op(x, g, beta, w, bias, eps, rowsum, sumsq), split)
        return (*y, x) if passthrough else y if split else y[0]   # autograd adds x's two gradients
    return LayerNormLinearFunction.apply(x, g, beta, w, bias, eps, rowsum, sumsq, passthrough, split)


def _norm_then_linear(x: torch.Tensor, g: torch.Tensor, beta: torch.Tensor | None, w: torch.Tensor,
                      bias: torch.Tensor | None, eps: float, passthrough: bool
                      ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """layer_norm_linear, or rms_norm_linear where `beta` is None, without the producer's row
    sums, where the norm runs in one pass over whole rows: that pass forms the sums and the norm's
    output from one read of x, then the linear layer reads the output. The fold needs a map for
    the sums and one for W', and its backward stores the norm's output anyway (for dw). Measured
    on an H100, fwd + bwd (docs/ops.md): LayerNorm's fold took 1.03-1.07x this path's time at the
    micro suite's three sizes (10 kernels against 7), RMSNorm's 1.02-1.08x round by round. x's
    gradient from a passed-through x joins in the norm's dx kernel."""
    from ..nn.layer_norm import layer_norm, rms_norm  # that module imports this one
    from .linear import linear

    normed = (rms_norm(x, g, eps, passthrough=passthrough) if beta is None
              else layer_norm(x, g, beta, eps, passthrough=passthrough))
    if passthrough:
        return linear(normed[0], w, bias), normed[1]
    return linear(normed, w, bias)


@follows_autocast()
def out_proj_residual(x: torch.Tensor, w: torch.Tensor, residual: torch.Tensor,
                      bias: torch.Tensor | None = None, dropout_p: float = 0.0, seed: int | None = None,
                      stats: str | None = "rms") -> torch.Tensor | tuple[torch.Tensor, ...]:
    """y = residual + dropout(x @ w.T + bias), one GEMM whose epilogue also sums what the next
    norm needs: returns (y, ss) for stats="rms", (y, ss, s) for "layer", y alone for None, with
    ss = Σ y² and s = Σ y per row of y as stored (float32, shape x.shape[:-1], not
    differentiable).

    x: [..., K]; w: [N, K] with x's dtype; residual: [..., N]; bias: [N]. The dropout mask is a
    function of (seed, row, column) (docs/dsl.md#dropout); without `seed` one is drawn from
    torch's CPU generator. y has x's dtype.
    """
    n = _check_linear("out_proj_residual", x, w)[2]
    _check_bias("out_proj_residual", bias, n, x)
    checks.float_tensor("out_proj_residual", "residual", residual, x)
    if tuple(residual.shape) != (*x.shape[:-1], n):
        raise LaunchError(f"out_proj_residual: residual must have shape {[*x.shape[:-1], n]} "
                          f"(x's rows, N), got {list(residual.shape)}")
    if stats not in STATS:
        raise LaunchError(f"out_proj_residual: stats must be one of {tuple(STATS)}, got {stats!r}")
    if isinstance(dropout_p, bool) or not isinstance(dropout_p, numbers.Real) or not 0 <= dropout_p <= 1:
        raise LaunchError(f"out_proj_residual: dropout_p must be a number in [0, 1], got {dropout_p!r}")
    p = float(dropout_p)
    if p > 0.0 and seed is not None:
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
            raise LaunchError(f"out_proj_residual: seed must be an int or None, got {seed!r}")
        seed = int(seed)
    from ..integrations import compile as custom  # here: that module imports this one
    if custom.routed():   # inside torch.compile: the custom op coda::out_proj_residual, no graph break
        return custom.out_proj_residual_op(x, w, residual, bias, p, seed, stats)
    seed = resolve_seed(p, seed)
    return OutProjResidualFunction.apply(x, w, residual, bias, p, seed, stats)


# -- argument checks: a LaunchError naming the argument ------------------------------------------
def _check_linear(op: str, x, w) -> tuple[int, int, int]:
    """x [..., K] and w [N, K] of one dtype; returns (M rows, K, N)."""
    checks.float_tensor(op, "x", x)
    if x.dim() == 0 or x.shape[-1] == 0:
        raise LaunchError(f"{op}: x must be [..., K] with K > 0, got shape {list(x.shape)}")
    checks.float_tensor(op, "w", w, x)
    k = x.shape[-1]
    if w.dim() != 2 or w.shape[1] != k:
        raise LaunchError(f"{op}: w must be [N, K] with K = {k} (x's last dim), got shape {list(w.shape)}")
    if w.dtype != x.dtype:
        raise LaunchError(f"{op}: w has dtype {w.dtype} but x has {x.dtype}; they must match")
    return x.numel() // k, k, w.shape[0]


def _check_bias(op: str, bias, n: int, x: torch.Tensor) -> None:
    if bias is not None:
        checks.vector(op, "bias", bias, n, x)


@op_function
class RmsRstd(torch.autograd.Function):
    """rstd = rsqrt(ss / n + eps) with ss = Σ h² from `out_proj_residual(stats="rms")`.

    That op marks `ss` non-differentiable (its consumer `rms_norm_linear(sumsq=)` differentiates
    through `x`), but `swiglu_mlp(rstd=)` returns `d rstd`, so this function carries it to `h`:
    dh = (d rstd · ∂rstd/∂ss · 2) ⊙_row h = (−d rstd · rstd³ / n) ⊙_row h, one CODA map.
    """

    @staticmethod
    def forward(ctx, h: torch.Tensor, ss: torch.Tensor, eps: float) -> torch.Tensor:
        rstd = torch.rsqrt(ss / h.shape[-1] + eps)
        ctx.save_for_backward(h, rstd)
        return rstd.to(h.dtype)

    @staticmethod
    def backward(ctx, drstd: torch.Tensor):
        h, rstd = ctx.saved_tensors
        coef = -drstd.to(rstd.dtype) * rstd ** 3 / h.shape[-1]
        dh = SCALE_ROWS.map(as_rows(h)[0], c=coef.reshape(-1))["output"].reshape(h.shape)
        return dh, None, None


@follows_autocast("ss")
def rms_rstd(h: torch.Tensor, ss: torch.Tensor, eps: float) -> torch.Tensor:
    """The RMSNorm row scale of h from its row sums of squares `ss` (as `out_proj_residual`
    emits them), differentiable with respect to h, for ops that take `rstd=` (swiglu_mlp)."""
    checks.float_tensor("rms_rstd", "h", h)
    if h.dim() == 0:
        raise LaunchError(f"rms_rstd: h must be [..., n], got {checks.describe(h)}")
    checks.row_stats("rms_rstd", h, math.prod(h.shape[:-1]), ss=ss)
    eps = checks.eps("rms_rstd", eps)
    from ..integrations import compile as custom  # here: that module imports this one
    if custom.routed():   # inside torch.compile: the custom op coda::rms_rstd, no graph break
        return custom.rms_rstd_op(h, ss, eps)
    return RmsRstd.apply(h, ss, eps)
