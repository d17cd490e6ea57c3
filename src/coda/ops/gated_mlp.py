"""Gated MLPs (SwiGLU, GeGLU) as GEMM + epilogue programs, forward and backward.

x is [..., H] (viewed as rows [M, H]); w_gate_up is [2F, H] with the gate and up projections
interleaved (row 2j is gate row j, row 2j+1 is up row j: `interleave`), so the GEMM's output
column pairs (2j, 2j+1) are (gate_j, up_j); w_down is [O, F] (nn.Linear layouts). f is silu
(SwiGLU) or gelu with the tanh approximation (GeGLU), f' its derivative; r is an optional
RMSNorm row scale (rstd, [M]) folded in: then x is the un-normalized input and w_gate_up already
carries the norm's gain, w_gate_up = w ⊙ g (see docs/ops.md).

    pre      = r ⊙_row (x @ w_gate_up.T)          [M, 2F]   gate = pre[:, 0::2], up = pre[:, 1::2]
    h        = f(gate) * up                       [M, F]
    y        = h @ w_down.T + residual            [M, O]
    ss       = row_sum(y * y)                     [M]       (stats=True: the next RMSNorm's input)

forward   h, gate, up    = up_program     GEMM x @ w_gate_up.T; epilogue: * r, unpack, f(gate) * up,
                                          save gate and up (only when a backward can follow)
          y, ss          = down_program   GEMM h @ w_down.T; epilogue: + residual, ss = row_sum(y*y)
backward  dy'            = dy + 2 dss ⊙_row y      (STATS_GRAD.map, only when ss carries a gradient)
          dpre, dr       = grad_program   GEMM dy' @ w_down = dh; epilogue:
                                          dgate = r dh up f'(gate),  dup = r dh f(gate),
                                          dpre = pack(dgate, dup)   [M, 2F], interleaved as pre,
                                          dr = row_sum(dh up f'(gate) gate + dh f(gate) up)
          dx             = dpre @ w_gate_up   (one GEMM over K = 2F; dx_program or cuBLAS)
          dw_gate_up     = dpre.T @ x         (cuBLAS: weight_grad)
          dw_down        = dy'.T @ h  (h is the up GEMM's output, kept alive: no recompute)
          dresidual      = dy',   drstd = dr / r   (sum_c dpre * pre = r * d(loss)/dr; 0 where r = 0)

With `sumsq` (ss_x = Σ x² per row, as out_proj_residual(stats="rms") emits it) in place of rstd,
the norm is the op's own: every epilogue computes r = rsqrt(ss_x / H + eps), and the gradient
through r(x), −(dr r² / H) ⊙_row x, joins dx in its GEMM's epilogue (dx_program). When the
residual is x itself (a pre-norm block's `y = x + mlp(norm(x))`), its gradient dy' joins there
too: dx then carries all of x's gradient in one kernel, where autograd would add three tensors.

`pack` writes dgate and dup in w_gate_up's interleaved row order, so the gradient of the
pre-activation is one [M, 2F] tensor and each GEMM reading it is one GEMM over the whole fused
weight (docs/ops.md counts the alternatives: before `pack` they were two GEMMs each, joined by
a float32 partial of dx).
"""

from __future__ import annotations

import functools

import torch

from .. import compile as compile_program
from ..errors import LaunchError
from ..runtime.program import Program
from . import checks
from .common import (
    PLAIN,
    as_rows,
    as_stored,
    follows_autocast,
    matmul,
    op_function,
    present,
    weight_grad,
)
from .norms import FOLD, NORM_DW, RMS_ROW, RMS_ROW_PARAMS

#: activation -> (f, f') by primitive name; the op names follow the activation.
ACTIVATIONS = {"silu": ("silu", "silu_grad"), "gelu": ("gelu", "gelu_grad")}
OP_NAMES = {"silu": "swiglu", "gelu": "geglu"}

# The gradient reaching y when ss = row_sum(y * y) is used too: dy + 2 dss y (a map over dy).
STATS_GRAD = compile_program("EPILOGUE ss_grad(y: tile, dss: row) { output = input + 2.0 * dss * y; }")


#: norm -> (the epilogue's parameters, the statements that define `rstd`): a row scale given
#: (`rstd=`), or computed per row from Σ x² (`sumsq=`).
NORMS = {None: ([], ""), "rstd": (["rstd: row"], ""), "sumsq": ([RMS_ROW_PARAMS], RMS_ROW)}


@functools.cache
def up_program(activation: str, norm: str | None, save: bool) -> Program:
    """GEMM x @ w_gate_up.T; epilogue: `output = f(gate) * up` over the unpacked column pairs.

    For example ("silu", "rstd", True) is
        EPILOGUE swiglu_up(rstd: row) {
          gate, up = unpack(input * rstd); save g = gate; save u = up; output = silu(gate) * up;
        }
    """
    f = ACTIVATIONS[activation][0]
    params, row = NORMS[norm]
    pre = "input * rstd" if norm else "input"
    body = [row, f"gate, up = unpack({pre});", "save g = gate; save u = up;" * save,
            f"output = {f}(gate) * up;"]
    return compile_program(f"EPILOGUE {OP_NAMES[activation]}_up({', '.join(params)}) "
                           f"{{ {' '.join(body)} }}")


@functools.cache
def down_program(residual: bool, stats: torch.dtype | None) -> Program:
    """GEMM h @ w_down.T; epilogue: `output = input + residual; ss = row_sum(output * output);`
    (either part only when asked; with `stats`, the output's dtype, the sum is of the output as
    stored: `as_stored`)."""
    if not residual and stats is None:
        return PLAIN
    y = "input + residual" if residual else "input"
    body = [f"output = {y if stats is None else as_stored(y, stats)};",
            "ss = row_sum(output * output);" * (stats is not None)]
    return compile_program(f"EPILOGUE gated_down({'residual: tile' * residual}) {{ {' '.join(body)} }}")


@functools.cache
def grad_program(activation: str, norm: str | None, rstd_grad: bool) -> Program:
    """GEMM dy @ w_down = dh; epilogue: the gradients at gate and up (times r when folded in),
    interleaved as the up GEMM's output columns, and `dr = row_sum(dpre * pre)` when r needs a
    gradient.

    For example ("silu", "rstd", True) is
        EPILOGUE swiglu_grad(g: tile, u: tile, rstd: row) {
          dg = input * u * silu_grad(g); du = input * silu(g);
          output = pack(dg * rstd, du * rstd); dr = row_sum(dg * g + du * u);
        }
    """
    f, df = ACTIVATIONS[activation]
    params, row = NORMS[norm]
    scale = " * rstd" if norm else ""
    body = [row, f"dg = input * u * {df}(g);", f"du = input * {f}(g);",
            f"output = pack(dg{scale}, du{scale});", "dr = row_sum(dg * g + du * u);" * rstd_grad]
    params = ", ".join(["g: tile, u: tile", *params])
    return compile_program(f"EPILOGUE {OP_NAMES[activation]}_grad({params}) {{ {' '.join(body)} }}")


@functools.cache
def dx_program(scale: str | None, norm_grad: bool, residual_grad: bool) -> Program:
    """GEMM dpre @ w_gate_up plus what else x's gradient has: the row scale r when dpre does not
    carry it yet (`scale`, a NORMS key: float16, `unscaled_grad`), the gradient through r(x)
    (`sumsq=`) and the residual's when the residual is x (one of them at least: else dx is a
    plain GEMM, cuBLAS's).

    For example (None, True, True) is
        EPILOGUE gated_dx(ss: row, inv_n: scalar, eps: scalar, dr: row, xin: tile, dres: tile) {
          rstd = rsqrt(ss * inv_n + eps);
          output = input - dr * rstd * rstd * inv_n * xin + dres;
        }
    """
    params, row = NORMS["sumsq" if norm_grad else scale]
    params = [*params, *["dr: row", "xin: tile"] * norm_grad, *["dres: tile"] * residual_grad]
    terms = (" * rstd" * bool(scale) + " - dr * rstd * rstd * inv_n * xin" * norm_grad
             + " + dres" * residual_grad)
    return compile_program(f"EPILOGUE gated_dx({', '.join(params)}) {{"
                           f" {row} output = input{terms}; }}")


#: x's rows times their scale r, by NORMS key, in x's dtype (one map): the weight gradient's
#: operand where dpre does not carry r (`unscaled_grad`)
NORMALIZED = {norm: compile_program(f"EPILOGUE normalized({', '.join(NORMS[norm][0])}) {{"
                                    f" {NORMS[norm][1]} output = input * rstd; }}")
              for norm in ("rstd", "sumsq")}


def unscaled_grad(norm: str | None, x: torch.Tensor) -> bool:
    """Whether the dh epilogue leaves the gradient at the pre-activations without the folded
    norm's row scale r: in float16, where r ⊙ dpre, stored, is 1/r = rms(x) times smaller than
    eager's gradient there and a residual stream in the hundreds puts its low bits in float16's
    subnormals (docs/ops.md, "float16 with a large residual stream"); r then scales dx in its
    epilogue and x's rows in the weight gradient's operand (NORMALIZED: one more [M, H] pass).
    bfloat16 has float32's exponent range: it keeps the one pass."""
    return norm is not None and x.dtype == torch.float16


@follows_autocast()
def interleave(w_gate: torch.Tensor, w_up: torch.Tensor, gain: torch.Tensor | None = None) -> torch.Tensor:
    """The fused up-projection weight [2F, ...] from w_gate and w_up [F, ...]: row 2j is
    w_gate[j], row 2j + 1 is w_up[j] (a bias [F] works too). With `gain` ([H], an RMSNorm's
    weight folded into the GEMM) the rows are scaled by it: `interleave(w_gate, w_up) * gain`,
    in one pass over the weights each way (InterleaveGain) where torch needs two forward and
    four backward."""
    for name, w in (("w_gate", w_gate), ("w_up", w_up)):
        if not isinstance(w, torch.Tensor) or w.dim() == 0:
            raise LaunchError(f"{name} must be a tensor [F, H], got {checks.describe(w)}")
    if w_gate.shape != w_up.shape or w_gate.dtype != w_up.dtype:
        raise LaunchError(f"w_gate and w_up must have one shape and dtype; got {checks.describe(w_gate)} "
                          f"and {checks.describe(w_up)}")
    if gain is None:
        return torch.stack((w_gate, w_up), dim=1).flatten(0, 1)
    if w_gate.dim() != 2:
        raise LaunchError(f"interleave with a gain takes weights [F, H], got {checks.describe(w_gate)}")
    checks.float_tensor("interleave", "w_gate", w_gate)
    checks.optional_tensor("gain", gain, (w_gate.shape[1],), w_gate)
    from ..integrations import compile as custom  # here: that module imports this one
    if custom.routed():   # inside torch.compile: the custom op coda::interleave_gain, no graph break
        return custom.interleave_gain_op(w_gate, w_up, gain)
    return InterleaveGain.apply(w_gate, w_up, gain)


@op_function
class InterleaveGain(torch.autograd.Function):
    """`interleave(w_gate, w_up) * gain`: the [2F, H] result is [F, 2H] with gate row j in the
    first H columns of row j and up row j in the last, so it is two maps writing halves of one
    buffer. Backward (d the [2F, H] gradient, again two halves of [F, 2H]): d w_gate =
    d_gate * gain and dgain = col_sum(d_gate * w_gate) + col_sum(d_up * w_up), one map a half."""

    @staticmethod
    def forward(ctx, w_gate: torch.Tensor, w_up: torch.Tensor, gain: torch.Tensor) -> torch.Tensor:
        f, h = w_gate.shape
        pairs = w_gate.new_empty(f, 2 * h)
        for half, w in enumerate((w_gate, w_up)):
            FOLD.map(w, g=gain, out=pairs[:, half * h:(half + 1) * h])
        ctx.save_for_backward(w_gate, w_up, gain)
        return pairs.view(2 * f, h)

    @staticmethod
    def backward(ctx, d: torch.Tensor):
        w_gate, w_up, gain = ctx.saved_tensors
        f, h = w_gate.shape
        pairs = d.reshape(f, 2 * h)
        grads = [NORM_DW.map(pairs[:, half * h:(half + 1) * h], g=gain, w=w)
                 for half, w in enumerate((w_gate, w_up))]
        # the two halves' float32 sums added and rounded to gain's dtype in one kernel
        dgain = torch.add(grads[0]["dg"], grads[1]["dg"], out=gain.new_empty(gain.shape))
        return grads[0]["output"], grads[1]["output"], dgain


def deinterleave(w_gate_up: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(w_gate, w_up) from an interleaved [2F, ...] weight: the standard layout for checkpoints
    (contiguous copies, so saving one does not save the whole fused storage)."""
    if not isinstance(w_gate_up, torch.Tensor) or w_gate_up.dim() == 0 or w_gate_up.shape[0] % 2:
        raise LaunchError(f"w_gate_up must be a tensor [2F, ...] with an even first dimension, got "
                          f"{checks.describe(w_gate_up)}")
    return w_gate_up[0::2].contiguous(), w_gate_up[1::2].contiguous()


@op_function
class GatedMLPFunction(torch.autograd.Function):
    """y = f(gate) * up @ w_down.T + residual (and ss): two GEMMs forward; backward one GEMM for
    dh with the gated derivative in its epilogue, one for dx, two for the weight gradients."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, w_gate_up: torch.Tensor, w_down: torch.Tensor,
                residual: torch.Tensor | None, rstd: torch.Tensor | None, activation: str,
                stats: bool, grad: bool, sumsq: torch.Tensor | None = None, eps: float = 0.0):
        ctx.set_materialize_grads(False)
        rows, lead = as_rows(x)
        scale = row_scale(rstd, sumsq)
        ctx.eps = None if sumsq is None else eps
        norm, row = _norm(scale, ctx.eps, rows.shape[1])
        up = up_program(activation, norm, grad)(rows, w_gate_up.T, **row)
        res = None if residual is None else as_rows(residual, "residual")[0]
        down = down_program(res is not None, up["output"].dtype if stats else None)
        down = down(up["output"], w_down.T, **present(residual=res))
        y = down["output"].reshape(*lead, w_down.shape[0])
        ctx.save_for_backward(x, w_gate_up, w_down, scale, up.get("g"), up.get("u"), up["output"],
                              y if stats else None)
        ctx.activation, ctx.residual_is_x = activation, residual is x
        ctx.residual = None if residual is None else (residual.shape, residual.dtype)
        ctx.rstd = None if rstd is None else (rstd.shape, rstd.dtype)
        if stats:
            return y, down["ss"].reshape(lead)
        return y

    @staticmethod
    def backward(ctx, dy: torch.Tensor | None, dss: torch.Tensor | None = None):
        if dy is None and dss is None:   # no gradient reached the outputs
            return (None,) * 10
        x, w_gate_up, w_down, scale, gate, up, h, y = ctx.saved_tensors
        need_x, need_wgu, need_wd, need_res, need_r = ctx.needs_input_grad[:5]
        rows = as_rows(x)[0]
        dy = as_rows(torch.zeros_like(y) if dy is None else dy)[0]   # dy is None: only ss is used
        if dss is not None:
            dy = STATS_GRAD.map(dy, y=as_rows(y)[0], dss=dss.reshape(-1))["output"]
        norm, row = _norm(scale, ctx.eps, rows.shape[1])
        norm_grad = norm == "sumsq" and need_x         # x's gradient through its own r(x)
        residual_grad = ctx.residual_is_x and need_x   # joins dx's epilogue (x's gradient)
        dx = dw_gate_up = drstd = None
        if need_x or need_wgu or need_r:
            unscaled = unscaled_grad(norm, rows)
            prog = grad_program(ctx.activation, None if unscaled else norm, need_r or norm_grad)
            outs = prog(dy, w_down, g=gate, u=up, **({} if unscaled else row))
            dpre = outs["output"]
            if need_x:
                terms = (dict(row) if unscaled or norm_grad else {}) | (
                    dict(dr=outs["dr"], xin=rows) if norm_grad else {}) | (
                    dict(dres=dy) if residual_grad else {})
                program = dx_program(norm if unscaled else None, norm_grad, residual_grad)
                dx = (program(dpre, w_gate_up, **terms)["output"] if terms
                      else matmul(dpre, w_gate_up)).reshape(x.shape)
            if need_wgu:
                operand = NORMALIZED[norm].map(rows, **row)["output"] if unscaled else rows
                dw_gate_up = weight_grad(dpre, operand, like=w_gate_up)
            if need_r:
                shape, dtype = ctx.rstd
                # (a row scaled by 0 has pre = 0, where f(gate) * up has a zero gradient: its
                # d loss/d r is 0, not dr / r = 0 / 0)
                drstd = torch.where(scale == 0, 0.0, outs["dr"] / scale).to(dtype).reshape(shape)
        dw_down = weight_grad(dy, h, like=w_down) if need_wd else None
        dresidual = None
        if need_res and not residual_grad:
            shape, dtype = ctx.residual
            dresidual = dy.reshape(shape).to(dtype)
        return dx, dw_gate_up, dw_down, dresidual, drstd, None, None, None, None, None


def row_scale(rstd: torch.Tensor | None, sumsq: torch.Tensor | None) -> torch.Tensor | None:
    """What the saved row-scale slot holds, as [M]: Σ x² when the norm is the op's own
    (`sumsq=`, then ctx.eps is set), else rstd, else nothing."""
    scale = sumsq if sumsq is not None else rstd
    return None if scale is None else scale.reshape(-1)


def _norm(scale: torch.Tensor | None, eps: float | None, n: int) -> tuple[str | None, dict]:
    """(NORMS key, the launch operands that define rstd) of a row-scale slot: empty, rstd, or
    Σ x² (eps not None)."""
    if scale is None:
        return None, {}
    if eps is None:
        return "rstd", dict(rstd=scale)
    return "sumsq", dict(ss=scale, inv_n=1.0 / n, eps=eps)


@follows_autocast("rstd", "sumsq")
def swiglu_mlp(x: torch.Tensor, w_gate_up: torch.Tensor, w_down: torch.Tensor,
               residual: torch.Tensor | None = None, rstd: torch.Tensor | None = None,
               stats: bool = False, sumsq: torch.Tensor | None = None, eps: float = 1e-6
               ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """`(silu(gate) * up) @ w_down.T + residual`, gate and up the interleaved column pairs of
    `rstd ⊙_row (x @ w_gate_up.T)`.

    x [..., H], w_gate_up [2F, H] (`interleave(w_gate, w_up)`), w_down [O, F], residual [..., O],
    rstd [...] (an RMSNorm's row scale, folded in). `sumsq` ([...] or [M], float32 Σ x² per row,
    as out_proj_residual(stats="rms") emits it) folds RMSNorm(x) instead: rstd = rsqrt(sumsq / H
    + eps) per row in the kernels, differentiated through x (sumsq itself is not), as in
    rms_norm_linear. Returns y [..., O], or (y, ss) with stats=True, ss = sum(y * y, -1) of y
    as stored, in float32 (the next RMSNorm's statistics). Differentiable in every tensor argument but sumsq.
    """
    return _gated_mlp("silu", x, w_gate_up, w_down, residual, rstd, stats, sumsq, eps)


@follows_autocast("rstd", "sumsq")
def geglu_mlp(x: torch.Tensor, w_gate_up: torch.Tensor, w_down: torch.Tensor,
              residual: torch.Tensor | None = None, rstd: torch.Tensor | None = None,
              stats: bool = False, sumsq: torch.Tensor | None = None, eps: float = 1e-6
              ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """`swiglu_mlp` with gelu (tanh approximation) in place of silu."""
    return _gated_mlp("gelu", x, w_gate_up, w_down, residual, rstd, stats, sumsq, eps)


def _gated_mlp(activation: str, x, w_gate_up, w_down, residual, rstd, stats: bool, sumsq, eps):
    if not isinstance(x, torch.Tensor) or x.dim() == 0 or not x.is_floating_point():
        raise LaunchError(f"x must be a floating-point tensor [..., hidden], got {checks.describe(x)}")
    lead = x.shape[:-1]
    checks.weight("w_gate_up", w_gate_up, x, x.shape[-1])
    if w_gate_up.shape[0] % 2:
        raise LaunchError(f"w_gate_up is {list(w_gate_up.shape)}: expected [2F, H] with interleaved "
                          f"gate and up rows (an even number of rows)")
    checks.weight("w_down", w_down, x, w_gate_up.shape[0] // 2, "half of w_gate_up's out_features")
    checks.optional_tensor("residual", residual, (*lead, w_down.shape[0]), x)
    checks.optional_tensor("rstd", rstd, tuple(lead), x)
    checks.flag("stats", stats)
    if sumsq is not None:
        if rstd is not None:
            raise LaunchError("give rstd (a row scale) or sumsq (the norm's Σ x²), not both")
        rows = x.numel() // x.shape[-1]
        if not isinstance(sumsq, torch.Tensor) or tuple(sumsq.shape) not in (tuple(lead), (rows,)):
            raise LaunchError(f"sumsq must be one value per row of x, shape {list(lead)}, got "
                              f"{checks.describe(sumsq)}")
        checks.row_sums(f"{OP_NAMES[activation]}_mlp", "sumsq", sumsq, x)
        eps = checks.eps(f"{OP_NAMES[activation]}_mlp", eps)
    grad = torch.is_grad_enabled() and any(
        t is not None and t.requires_grad for t in (x, w_gate_up, w_down, residual, rstd))
    from ..integrations import compile as custom  # here: that module imports this one
    if custom.routed():   # inside torch.compile: the custom op coda::gated_mlp, no graph break
        return custom.gated_mlp_op(x, w_gate_up, w_down, residual, rstd, activation, stats, grad,
                                   sumsq, eps)
    return GatedMLPFunction.apply(x, w_gate_up, w_down, residual, rstd, activation, stats, grad,
                                  sumsq, eps)
