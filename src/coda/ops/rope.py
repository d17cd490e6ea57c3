"""The fused QKV projection with rotary position embedding (RoPE) in the GEMM's epilogue.

x is [..., K] (viewed as rows [M, K]); w_qkv is [N, K] with N = (n_heads + 2 n_kv_heads) * d
(d = head_dim, even): rows of the q heads, then the k heads, then the v heads (grouped-query
attention when n_kv_heads < n_heads). cos and sin are [M, d/2] tables: the angle of frequency i
at the position of row m. Rotation is CODA's interleaved convention: pair i of a head is its
columns (2i, 2i + 1). Models written with HuggingFace's rotate_half convention (pair i is
(i, i + d/2)) permute their q and k weight rows once with `permute_for_interleaved_rope`.

    pre = x @ w_qkv.T + bias                                       [M, N]
    out[:, 2j], out[:, 2j+1] = R(θ[:, j mod d/2]) (pre[:, 2j], pre[:, 2j+1])   for 2j < n_rot
    out = pre on the v columns, n_rot = (n_heads + n_kv_heads) d
    q, k, v = views of out: [..., n_heads, d], [..., n_kv_heads, d], [..., n_kv_heads, d]

Every head starts at a multiple of d, so pair j of the whole row is pair j mod d/2 of its head and
one [M, d/2] table serves all q and k heads; no pair straddles the q/k/v boundaries.

forward   out          = forward_program  GEMM x @ w_qkv.T; epilogue: + bias, rope where col < n_rot
backward  dpre, db     = grad_map(rotate=True).map(dq), .map(dk): rope(dy, cos, -sin) (the
                         inverse rotation R(-θ) = R(θ)^T), db = col_sum; grad_map(rotate=False)
                         .map(dv) copies dv (and sums db): each writes its column range of one
                         [M, N] buffer through `out=`
          dx           = dpre @ w_qkv  (matmul),   dw = dpre.T @ x  (weight_grad)

With `norm_weight` g (qkv_rope(..., norm_weight=g)) the GEMM is of RMSNorm(x; g): the norm
folded as in norms.rms_norm_linear (W' = w_qkv ⊙ g, the row scale rstd in the same epilogue,
before the bias and the rotation); the backward is the maps above, then rms_norm_linear's
kernels on dpre (norms.rms_norm_linear_grads).

The inverse rotation cannot ride in a backward GEMM's epilogue: it mixes the two columns of each
pair of dy with an angle that depends on the row (the token), and in both backward GEMMs those
columns are summed over before any epilogue sees them: they are the reduction dimension of
dx = dpre @ w (dx[m] = dy[m] R_m^T w: a different weight for every row m, so not foldable into
w either), and dw = dpre.T @ x sums over the rows m, each with its own R_m. It is a map over the
incoming gradient, which no CODA GEMM produces (it comes from attention's backward).

q, k and v are returned as three outputs (views of one buffer) so that autograd hands the
backward three gradients without summing full-size zero-padded copies of each.
"""

from __future__ import annotations

import functools

import torch

from .. import compile as compile_program
from ..errors import LaunchError
from ..runtime.program import Program
from . import checks
from .common import as_rows, follows_autocast, matmul, op_function, weight_grad
from .norms import RMS_ROW, RMS_ROW_PARAMS, rms_fold, rms_norm_linear_grads


@functools.cache
def forward_program(bias: bool, norm: bool = False) -> Program:
    """GEMM x @ w_qkv.T; epilogue: the RMSNorm row scale (`norm`: x is un-normalized and w_qkv
    carries the norm's gain, as in rms_norm_linear), the bias, then the rotation of the q and k
    columns (those below n_rot). With bias:
        EPILOGUE qkv_rope(bias: col, cos: head, sin: head, n_rot: scalar) {
          pre = input + bias; output = where(col_index() < n_rot, rope(pre, cos, sin), pre);
        }
    """
    params = [RMS_ROW_PARAMS] * norm + ["bias: col"] * bias + ["cos: head, sin: head, n_rot: scalar"]
    pre = "input * rstd" if norm else "input"
    pre = f"{pre} + bias" if bias else pre
    return compile_program(f"EPILOGUE qkv_rope({', '.join(params)}) {{ {RMS_ROW * norm} pre = {pre}; "
                           f"output = where(col_index() < n_rot, rope(pre, cos, sin), pre); }}")


@functools.cache
def grad_map(rotate: bool, bias_grad: bool) -> Program:
    """The map over dq or dk (`rotate`, launched with sin = -sin: the inverse rotation) or dv
    (a copy into the [M, N] gradient), with the bias gradient `db = col_sum(output)` if asked."""
    body = ["output = rope(input, cos, sin);" if rotate else "output = input;",
            "db = col_sum(output);" * bias_grad]
    name, params = ("qkv_rope_grad", "cos: head, sin: head") if rotate else ("qkv_copy_grad", "")
    return compile_program(f"EPILOGUE {name}({params}) {{ {' '.join(body)} }}")


def permute_for_interleaved_rope(w: torch.Tensor, n_heads: int, head_dim: int,
                                 inverse: bool = False) -> torch.Tensor:
    """Rows of a q or k projection (weight [n_heads * head_dim, K] or bias [n_heads * head_dim])
    reordered from the rotate_half convention to the interleaved one: within each head, new row
    2i is old row i and new row 2i + 1 is old row i + head_dim / 2. `inverse=True` undoes it.

    The rotate_half rotation of pairs (i, i + d/2) is then the interleaved rotation of pairs
    (2i, 2i + 1) of the permuted rows, and attention scores are unchanged: q and k are permuted
    alike, so q k^T = (q P)(k P)^T. v is not rotated: its rows stay as they are."""
    _check_heads(n_heads, n_heads, head_dim)
    if not isinstance(w, torch.Tensor) or w.dim() == 0 or w.shape[0] != n_heads * head_dim:
        raise LaunchError(f"w must be a tensor [n_heads * head_dim = {n_heads * head_dim}, ...], got "
                          f"{checks.describe(w)}")
    split = (2, head_dim // 2) if not inverse else (head_dim // 2, 2)
    return w.reshape(n_heads, *split, *w.shape[1:]).transpose(1, 2).reshape(w.shape)


@op_function
class QKVRopeFunction(torch.autograd.Function):
    """q, k, v = split(rope(x @ w_qkv.T + bias)): one GEMM forward; backward three maps (the
    inverse rotation of dq and dk, the copy of dv) and two GEMMs."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, w_qkv: torch.Tensor, bias: torch.Tensor | None,
                cos: torch.Tensor, sin: torch.Tensor, heads: tuple[int, int, int]):
        ctx.set_materialize_grads(False)
        n_heads, n_kv_heads, head_dim = heads
        rows, lead = as_rows(x)
        n_rot = (n_heads + n_kv_heads) * head_dim
        operands = {"cos": cos, "sin": sin, "n_rot": n_rot} | ({} if bias is None else {"bias": bias})
        out = forward_program(bias is not None)(rows, w_qkv.T, **operands)["output"]
        ctx.save_for_backward(x, w_qkv, cos, sin)
        ctx.heads, ctx.bias_dtype = heads, None if bias is None else bias.dtype
        return split_heads(out, lead, heads)

    @staticmethod
    def backward(ctx, dq: torch.Tensor | None, dk: torch.Tensor | None, dv: torch.Tensor | None):
        x, w_qkv, cos, sin = ctx.saved_tensors
        need_x, need_w, need_b = ctx.needs_input_grad[:3]
        rows = as_rows(x)[0]
        dpre, db = pre_gradient((dq, dk, dv), rows, cos, sin, ctx.heads, need_b)
        dx = matmul(dpre, w_qkv).reshape(x.shape) if need_x else None
        dw = weight_grad(dpre, rows, like=w_qkv) if need_w else None
        return dx, dw, db.to(ctx.bias_dtype) if need_b else None, None, None, None


@op_function
class RMSNormQKVRopeFunction(torch.autograd.Function):
    """q, k, v = split(rope(RMSNorm(x; g) @ w_qkv.T + bias)): the norm folded as in
    rms_norm_linear (one GEMM forward, with the statistics pass unless `sumsq` is given);
    backward the maps of QKVRopeFunction, then rms_norm_linear's kernels on their dpre."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, g: torch.Tensor, w_qkv: torch.Tensor, bias: torch.Tensor | None,
                sumsq: torch.Tensor | None, eps: float, cos: torch.Tensor, sin: torch.Tensor,
                heads: tuple[int, int, int], passthrough: bool):
        ctx.set_materialize_grads(False)
        rows, lead = as_rows(x)
        row, folded = rms_fold(rows, g, w_qkv, sumsq, eps)
        operands = row | {"cos": cos, "sin": sin, "n_rot": (heads[0] + heads[1]) * heads[2]}
        operands |= {} if bias is None else {"bias": bias}
        out = forward_program(bias is not None, norm=True)(rows, folded.T, **operands)["output"]
        ctx.save_for_backward(x, g, w_qkv, row["ss"], cos, sin)
        ctx.heads, ctx.eps, ctx.bias_dtype = heads, eps, None if bias is None else bias.dtype
        qkv = split_heads(out, lead, heads)
        return (*qkv, x) if passthrough else qkv

    @staticmethod
    def backward(ctx, dq: torch.Tensor | None, dk: torch.Tensor | None, dv: torch.Tensor | None,
                 dres: torch.Tensor | None = None):
        x, g, w_qkv, ss, cos, sin = ctx.saved_tensors
        if dq is None and dk is None and dv is None:   # only the passed-through x was used
            return dres, *[None] * 9
        need_x, need_g, need_w, need_b = ctx.needs_input_grad[:4]
        dpre, db = pre_gradient((dq, dk, dv), as_rows(x)[0], cos, sin, ctx.heads, need_b)
        dx, dg, dw, _ = rms_norm_linear_grads(dpre, x, g, w_qkv, ss, ctx.eps,
                                              (need_x, need_g, need_w, False), dres)
        return dx, dg, dw, db.to(ctx.bias_dtype) if need_b else None, *[None] * 6


def split_heads(out: torch.Tensor, lead: torch.Size, heads: tuple[int, int, int]
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q [..., n_heads, d], k and v [..., n_kv_heads, d]: views of the [M, N] projection."""
    n_heads, n_kv_heads, head_dim = heads
    q, k, v = out.split((n_heads * head_dim, n_kv_heads * head_dim, n_kv_heads * head_dim), dim=1)
    return (q.view(*lead, n_heads, head_dim), k.view(*lead, n_kv_heads, head_dim),
            v.view(*lead, n_kv_heads, head_dim))


def pre_gradient(grads: tuple[torch.Tensor | None, ...], rows: torch.Tensor, cos: torch.Tensor,
                 sin: torch.Tensor, heads: tuple[int, int, int], bias_grad: bool
                 ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The gradient at the pre-rotation projection, [M, N], from dq, dk, dv (None: that output
    was not used): the inverse rotation of dq and dk and the copy of dv, each map writing its
    column range of one buffer; and the bias gradient (float32, the maps' column sums) if asked."""
    n_heads, n_kv_heads, head_dim = heads
    widths = (n_heads * head_dim, n_kv_heads * head_dim, n_kv_heads * head_dim)
    dpre = rows.new_empty(rows.shape[0], sum(widths))
    tables = {"cos": cos, "sin": -sin}   # R(θ)^T = R(-θ)
    wide = torch.float64 if rows.dtype == torch.float64 else torch.float32
    db, start = [], 0
    for grad, width, rotate in zip(grads, widths, (True, True, False), strict=True):
        block = dpre[:, start:start + width]
        start += width
        if grad is None:   # that output was not used
            block.zero_()
            db.append(torch.zeros(width, dtype=wide, device=dpre.device))
            continue
        outs = grad_map(rotate, bias_grad).map(grad.reshape(block.shape), out=block,
                                               **(tables if rotate else {}))
        db.append(outs.get("db"))
    return dpre, torch.cat(db) if bias_grad else None


@follows_autocast("sumsq")
def qkv_rope(x: torch.Tensor, w_qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
             n_heads: int, n_kv_heads: int, head_dim: int, bias: torch.Tensor | None = None,
             norm_weight: torch.Tensor | None = None, eps: float = 1e-6,
             sumsq: torch.Tensor | None = None, passthrough: bool = False) -> tuple[torch.Tensor, ...]:
    """q, k, v of grouped-query attention from one GEMM, with RoPE applied to q and k.

    x [..., K]; w_qkv [(n_heads + 2 n_kv_heads) * head_dim, K] (q rows, k rows, v rows), bias
    likewise [N]; cos, sin: [..., head_dim / 2] tables broadcastable to x's leading dims (e.g.
    [seq, head_dim / 2] for x [batch, seq, K]; with HuggingFace's [..., head_dim] tables take the
    first half). Interleaved pairs (2i, 2i + 1); for rotate_half checkpoints permute the q and k
    rows with `permute_for_interleaved_rope`. Returns views of one buffer: q [..., n_heads,
    head_dim], k and v [..., n_kv_heads, head_dim]. Differentiable in x, w_qkv and bias; cos and
    sin are constants (a table that requires grad is an error).

    With `norm_weight` (g [K]) the projection is of RMSNorm(x; g, eps), the norm folded into the
    GEMM as in `rms_norm_linear` (whose `sumsq` and `passthrough` it takes: the float32 Σ x² per
    row from x's producer, and (q, k, v, x) returned so that x's residual gradient joins its dx
    kernel); differentiable in g too.
    """
    if not isinstance(x, torch.Tensor) or x.dim() == 0 or not x.is_floating_point():
        raise LaunchError(f"x must be a floating-point tensor [..., hidden], got {checks.describe(x)}")
    _check_heads(n_heads, n_kv_heads, head_dim)
    n = (n_heads + 2 * n_kv_heads) * head_dim
    if not isinstance(w_qkv, torch.Tensor) or tuple(w_qkv.shape) != (n, x.shape[-1]):
        raise LaunchError(f"w_qkv must be [(n_heads + 2 n_kv_heads) * head_dim, hidden] = "
                          f"{[n, x.shape[-1]]}, got {checks.describe(w_qkv)}")
    _check_like("w_qkv", w_qkv, x)
    if bias is not None:
        if not isinstance(bias, torch.Tensor) or tuple(bias.shape) != (n,):
            raise LaunchError(f"bias must be a tensor [{n}], got {checks.describe(bias)}")
        _check_like("bias", bias, x, dtype=False)
    passthrough = checks.flag("passthrough", passthrough)
    if norm_weight is None and sumsq is not None:
        raise LaunchError("qkv_rope: sumsq is the RMSNorm's statistics; it needs norm_weight")
    if norm_weight is not None:
        checks.vector("qkv_rope", "norm_weight", norm_weight, x.shape[-1], x)
        checks.row_stats("qkv_rope", x, x.numel() // x.shape[-1], sumsq=sumsq)
        eps = checks.eps("qkv_rope", eps)
    lead, heads = x.shape[:-1], (n_heads, n_kv_heads, head_dim)
    tables = [_table(name, t, lead, head_dim, x) for name, t in (("cos", cos), ("sin", sin))]
    from ..integrations import compile as custom  # here: that module imports this one
    if custom.routed():   # inside torch.compile: custom ops (coda::qkv_rope), no graph break
        if norm_weight is None:
            qkv = custom.qkv_rope_op(x, w_qkv, bias, *tables, heads)
        else:   # the norm-folded GEMM, then the rotation as a map
            y = custom.rms_norm_linear_op(x, norm_weight, w_qkv, bias, sumsq, eps)
            y = custom.rope_op(y, *tables, (n_heads + n_kv_heads) * head_dim)
            qkv = split_heads(as_rows(y)[0], lead, heads)
    elif norm_weight is None:
        qkv = QKVRopeFunction.apply(x, w_qkv, bias, *tables, heads)
    else:   # x passed through by the Function: its gradient joins the dx kernel
        return RMSNormQKVRopeFunction.apply(x, norm_weight, w_qkv, bias, sumsq, eps, *tables, heads,
                                            passthrough)
    return (*qkv, x) if passthrough else qkv   # autograd adds the two gradients of x


@op_function
class RopeFunction(torch.autograd.Function):
    """RoPE on the first n_rot columns of an existing [M, N] tensor: one map forward, the inverse
    rotation (sin -> -sin) backward."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, n_rot: int) -> torch.Tensor:
        ctx.save_for_backward(cos, sin)
        ctx.n_rot = n_rot
        return rotate(x, cos, sin, n_rot)

    @staticmethod
    def backward(ctx, dy: torch.Tensor):
        cos, sin = ctx.saved_tensors
        return rotate(dy, cos, -sin, ctx.n_rot), None, None, None


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, n_rot: int) -> torch.Tensor:
    """x with the column pairs (2j, 2j + 1) below n_rot rotated by the [M, head_dim / 2] tables:
    the qkv_rope epilogue as a map over x."""
    rows = as_rows(x)[0]
    return forward_program(False).map(rows, cos=cos, sin=sin, n_rot=n_rot)["output"].reshape(x.shape)


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, head_dim: int,
         n_rot: int | None = None) -> torch.Tensor:
    """x [..., N] with RoPE applied to its first `n_rot` columns (default all), heads of
    `head_dim` columns, interleaved pairs (2i, 2i + 1): for a tensor that no CODA GEMM produced
    (after a GEMM use `qkv_rope`, which rotates in the epilogue). cos, sin: [..., head_dim / 2]
    tables as in `qkv_rope`. One map forward and one backward; differentiable in x."""
    if not isinstance(x, torch.Tensor) or x.dim() == 0 or not x.is_floating_point():
        raise LaunchError(f"x must be a floating-point tensor [..., N], got {checks.describe(x)}")
    _check_heads(1, 1, head_dim)
    n = x.shape[-1]
    if n_rot is None and n % head_dim:
        raise LaunchError(f"x's last dimension ({n}) must be a multiple of head_dim = {head_dim} (whole "
                          f"heads), or pass n_rot= for the columns to rotate")
    n_rot = n if n_rot is None else n_rot
    if not checks.integer(n_rot) or not 0 < n_rot <= n or n_rot % head_dim:
        raise LaunchError(f"n_rot must be a multiple of head_dim = {head_dim} in (0, {n}] (whole "
                          f"heads of x's {n} columns), got {n_rot!r}")
    if n % 2:   # the kernels pair every column (2j, 2j + 1): an odd width's copied rest apart
        return torch.cat((rope(x[..., :n_rot], cos, sin, head_dim), x[..., n_rot:]), dim=-1)
    tables = [_table(name, t, x.shape[:-1], head_dim, x) for name, t in (("cos", cos), ("sin", sin))]
    from ..integrations import compile as custom  # here: that module imports this one
    if custom.routed():   # inside torch.compile: the custom op coda::rope, no graph break
        return custom.rope_op(x, *tables, n_rot)
    return RopeFunction.apply(x, *tables, n_rot)


def _table(name: str, t: object, lead: torch.Size, head_dim: int, x: torch.Tensor) -> torch.Tensor:
    """A cos or sin table as [M, head_dim / 2] rows (broadcast to x's leading dims)."""
    shape = (*lead, head_dim // 2)
    if not isinstance(t, torch.Tensor) or not t.is_floating_point():
        raise LaunchError(f"{name} must be a floating-point tensor broadcastable to {list(shape)}, got "
                          f"{checks.describe(t)}")
    if t.dim() == 0 or t.shape[-1] != head_dim // 2:
        half = t.dim() > 0 and t.shape[-1] == head_dim
        hint = f" (of a rotate_half table [..., head_dim] take {name}[..., :{head_dim // 2}])" if half else ""
        raise LaunchError(f"{name} must be [..., head_dim / 2 = {head_dim // 2}], got "
                          f"{checks.describe(t)}{hint}")
    if t.requires_grad and torch.is_grad_enabled():
        raise LaunchError(f"{name} requires grad, but rope treats the tables as constants: "
                          f"pass {name}.detach()")
    _check_like(name, t, x, dtype=False)
    try:
        return torch.broadcast_to(t, shape).reshape(-1, head_dim // 2)
    except RuntimeError:
        raise LaunchError(f"{name} is {list(t.shape)}: it must broadcast to x's leading dims, "
                          f"{list(shape)}") from None


def _check_heads(n_heads: object, n_kv_heads: object, head_dim: object) -> None:
    for name, value in (("n_heads", n_heads), ("n_kv_heads", n_kv_heads), ("head_dim", head_dim)):
        if not checks.integer(value) or value <= 0:
            raise LaunchError(f"{name} must be a positive int, got {value!r}")
    if head_dim % 2:
        raise LaunchError(f"head_dim must be even (rope rotates pairs of columns), got {head_dim}")


def _check_like(name: str, t: torch.Tensor, x: torch.Tensor, dtype: bool = True) -> None:
    if dtype and t.dtype != x.dtype:
        raise LaunchError(f"{name} has dtype {t.dtype} but x has {x.dtype}: they must match")
    if t.device != x.device:
        raise LaunchError(f"{name} is on {t.device} but x is on {x.device}")

