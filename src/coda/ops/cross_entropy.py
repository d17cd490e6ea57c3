"""The LM head and its cross-entropy, without materializing the [tokens, vocab] logits.

x is [..., H] (viewed as rows [T, H]), w the head's weight [V, H] (nn.Linear layout), target [...]
integer classes; ε is the label smoothing, c the soft cap. Per row i:

    z = x @ w.T + bias,   ℓ = c·tanh(z / c)   (ℓ = z without a cap)
    lse = logsumexp_j ℓ_j,   t = ℓ_target,   s = Σ_j ℓ_j
    loss = (1 - ε)(lse - t) + ε(lse - s / V)  =  lse - (1 - ε)·t - (ε / V)·s

rows whose target is `ignore_index` have loss 0; "mean" divides the sum by the number of other
rows (torch.nn.functional.cross_entropy's definition, smoothing included). The gradient of the
loss of row i with respect to its logits, times the row's weight α_i (dL/dloss_i: 1 / n_valid for
"mean", 0 on ignored rows), is

    dℓ = (softmax(ℓ) - (1 - ε)·onehot(target) - ε / V) · α,    dz = dℓ · (1 - tanh²(z / c)).

The backward materializes the gradient of the logits one block of rows at a time, in x's
dtype: a block [rows, V] spans the vocabulary, so it gives its rows of dx complete (one GEMM),
and its share of dw (a sum over the tokens) is added into a float32 [V, H] accumulator (one GEMM
each, float32 `+=` in the epilogue); the last block's GEMM adds the accumulator and rounds once
to dw's dtype. Partial sums are never rounded to x's dtype (bf16 partials would grow the error
with the number of blocks: about 3x eager PyTorch's at 8). Four GEMMs of T·H·V in all, eager's
three plus the forward's:

  forward   lse, t, s   = FORWARD(c)  GEMM x @ w_c.T over wide chunks of columns; epilogue: bias,
                          cap, then the reductions lse = row_logsumexp(ℓ), t = row_sum(where(col
                          == target, ℓ, 0)), s = row_sum(ℓ) (only with smoothing). Launched with
                          outputs= naming these, so no tile is stored: the logits never reach
                          memory. The chunks' statistics combine in O(T): lse by logaddexp, t and
                          s by sums. Saved for backward: x, w, bias, target, lse (O(T) beyond the
                          inputs).
  backward  G_b, db_b   = GRAD(b)  for each block b of rows, the whole vocabulary: GEMM x_b @ w.T
                          again; epilogue: dz as above (lse, target and α are row operands),
                          db_b = col_sum(dz) (float32, summed over blocks). G_b [rows, V].
            dx_b        = G_b @ w, written straight into rows b of dx: complete, one GEMM.
            dw         += G_b.T @ x_b   (float32 accumulator; the last block rounds to dw).

A block holds about 2**26 logits (128 MiB in bf16) and at least 1024 rows, the K of the dw
GEMM, long enough for the accumulator's read and write to hide under the MMAs. The accumulator
(4·V·H bytes) and the block are what this costs in memory beyond the gradients themselves.

`low_memory=True` keeps the peak at or below Liger's instead (blocks of at most T·H·V/(V + H)
logits, no larger than Liger's chunk of ⌈T / ⌈V/H⌉⌉ rows (a power of two) × V, and no [V, H]
accumulator) at the price of a fifth GEMM: dw is then completed per chunk of vocabulary
columns, over all rows, which recomputes the logits a second time:

  backward  G_c, db_c   = GRAD(c)  for each chunk c of `chunk` vocabulary columns, all rows.
            dw_c        = G_c.T @ x, written straight into rows c of dw: complete, one GEMM.
            G_b, dx_b   as above, without the dw and db shares.

With `norm_weight` g the head is preceded by an RMSNorm that is folded into the GEMMs: x is the
un-normalized hidden state h, x̂ = rstd ⊙ h ⊙ g with rstd = rsqrt(mean(h²) + eps), and

    z = rstd ⊙_row ((h ⊙ g) @ w.T) + bias.

  forward   hg, ss      = NORM_INPUT.map(h): output = h ⊙ g, ss = row_sum(h²) (one pass over h);
                          rstd = rsqrt(ss / H + eps) is O(T); hg is the GEMMs' A operand, and
                          every epilogue above multiplies by the row operand rstd.
  backward  G' = dz ⊙ rstd (dL/d(hg @ w.T)) from GRAD; dw = G'.T @ hg; in the row blocks GRAD
            also gives r = row_sum(G' ⊙ (hg @ w.T)) (complete: the block spans the vocabulary),
            and with q = G'_b @ w (= rstd·dx̂) the epilogue of the dx GEMM (DX_NORM) writes
            dh = g ⊙ q - (rstd² r / H) ⊙ h and dg_b = col_sum(q ⊙ h), summed over blocks.

Targets ride as float row operands (exact below 2**24, so V must be smaller); an ignored row gets
the target -1, which matches no column. Targets outside [0, V) other than `ignore_index` are not
checked (that would synchronize with the device): such a row's target logit counts as 0.
"""

from __future__ import annotations

import functools

import torch

from .. import compile as compile_program
from ..errors import LaunchError
from ..runtime.program import Program
from . import checks
from .common import ADD_PARTIAL, PLAIN, as_rows, present, weight_grad

REDUCTIONS = ("mean", "sum", "none")
#: Chunk widths are multiples of this (half a 256-wide GEMM tile) when that wide, except the last.
CHUNK_ALIGN = 128
#: Row blocks are multiples of this many rows when that tall, except the last.
ROW_ALIGN = 16
#: The default backward's blocks hold about this many logits (128 MiB in bf16)...
BLOCK_LOGITS = 1 << 26
#: ...and at least this many rows: the K of the GEMM that adds a block's dw into the float32
#: accumulator, long enough for the accumulator's read and write to hide under the MMAs.
MIN_BLOCK_ROWS = 1024
#: The forward stores no [T, chunk] block, only per-tile partial statistics (12-16 bytes per row
#: and 128 columns, 1/20 of the backward's bf16 block): its chunks are this many backward chunks
#: wide. Fewer chunks, fewer launches.
FORWARD_CHUNK_FACTOR = 16
#: Targets travel as float32: exact below 2**24.
MAX_VOCAB = 2**24

# h ⊙ g (the GEMMs' A operand when an RMSNorm is folded in) and h's sum of squares, in one pass.
NORM_INPUT = compile_program("EPILOGUE ce_norm_input(g: col) {"
                             " output = input * g; ss = row_sum(input * input); }")


def _logit(bias: bool, norm: bool, softcap: bool) -> list[str]:
    """DSL statements computing `z` (input with the norm's row scale and the bias) and `logit`;
    with a cap also `th` = tanh(z / cap), whose derivative the backward reuses."""
    z = "input" + " * rstd" * norm + " + bias" * bias
    if softcap:
        return [f"z = {z};", "th = tanh(z / cap);", "logit = cap * th;"]
    return [f"logit = {z};"]


def _params(bias: bool, norm: bool, softcap: bool) -> list[str]:
    return ["bias: col"] * bias + ["rstd: row"] * norm + ["cap: scalar"] * softcap + [
        "target: row", "offset: scalar"]


@functools.cache
def forward_program(bias: bool, norm: bool, softcap: bool) -> Program:
    """The per-row statistics of one chunk; `offset` is the chunk's first column. For example
    (True, False, True) is
        EPILOGUE ce_forward(bias: col, cap: scalar, target: row, offset: scalar) {
          z = input + bias; th = tanh(z / cap); logit = cap * th;
          lse = row_logsumexp(logit);
          t = row_sum(where(col_index() + offset == target, logit, 0.0));
          s = row_sum(logit);
          output = logit;      # never stored: launched with outputs=("lse", "t"[, "s"])
        }
    """
    body = [*_logit(bias, norm, softcap),
            "lse = row_logsumexp(logit);",
            "t = row_sum(where(col_index() + offset == target, logit, 0.0));",
            "s = row_sum(logit);",
            "output = logit;"]
    return compile_program(f"EPILOGUE ce_forward({', '.join(_params(bias, norm, softcap))}) "
                           f"{{ {' '.join(body)} }}")


@functools.cache
def grad_program(bias: bool, norm: bool, softcap: bool) -> Program:
    """The logits' gradient of one chunk, recomputed from the GEMM: `hit` = 1 - ε, `smooth` =
    ε / V, `alpha` the rows' loss weights. For example (True, True, False) is
        EPILOGUE ce_grad(bias: col, rstd: row, target: row, offset: scalar, lse: row,
                         alpha: row, hit: scalar, smooth: scalar) {
          logit = input * rstd + bias;
          dz = (exp(logit - lse) - where(col_index() + offset == target, hit, 0.0) - smooth)
               * alpha;
          db = col_sum(dz);
          output = dz * rstd;
          r = row_sum(output * input);
        }
    """
    params = [*_params(bias, norm, softcap), "lse: row", "alpha: row", "hit: scalar",
              "smooth: scalar"]
    dlogit = "(exp(logit - lse) - where(col_index() + offset == target, hit, 0.0) - smooth) * alpha"
    body = [*_logit(bias, norm, softcap),
            f"dz = {dlogit} * (1.0 - th * th);" if softcap else f"dz = {dlogit};",
            "db = col_sum(dz);" * bias,
            "output = dz * rstd;" if norm else "output = dz;",
            "r = row_sum(output * input);" * norm]
    return compile_program(f"EPILOGUE ce_grad({', '.join(params)}) {{ {' '.join(body)} }}")


# The dx GEMM's epilogue with a folded RMSNorm: q = G'_b @ w, dh = g ⊙ q - k ⊙ h with the row
# k = rstd² r / H, and dg_b = col_sum(q ⊙ h). Without the norm dx_b is a plain GEMM (cuBLAS).
DX_NORM = compile_program("EPILOGUE ce_dx_norm(g: col, k: row, h: tile) {"
                          " q = input; output = g * q - k * h; dg = col_sum(q * h); }")


def block_shapes(tokens: int, hidden: int, vocab: int, chunk_size: int | None,
                 low_memory: bool = True) -> tuple[int, int]:
    """(chunk, rows): vocabulary columns per chunk (the forward's unit, and the low-memory dw
    pass's) and rows per block of the backward's row pass. With `chunk_size` a block holds
    `chunk_size`·T logits. Otherwise, with `low_memory`, at most T·H·V/(V + H): Liger's chunk
    holds min(T, ⌈T/⌈V/H⌉⌉ rounded up to a power of two) × V ≥ T·V/(V/H + 1) of them, never
    fewer; without, about BLOCK_LOGITS and at least MIN_BLOCK_ROWS rows."""
    logits = tokens * (chunk_size or hidden * vocab // (vocab + hidden))
    chunk = chunk_size or _align_down(logits // max(tokens, 1), CHUNK_ALIGN)
    if chunk_size or low_memory:
        rows = _align_down(logits // vocab, ROW_ALIGN)
    else:
        rows = max(_align_down(BLOCK_LOGITS // vocab, CHUNK_ALIGN), MIN_BLOCK_ROWS)
    return min(vocab, chunk), min(tokens, rows)


def _align_down(n: int, align: int) -> int:
    """n rounded down to a multiple of align, or n itself (at least 1) when smaller than align."""
    return n // align * align if n >= align else max(n, 1)


def _spans(total: int, width: int) -> list[tuple[int, int]]:
    """[i0, i1) ranges of `width` (the last one shorter) covering range(total)."""
    return [(i0, min(i0 + width, total)) for i0 in range(0, total, width)]


class LinearCrossEntropyFunction(torch.autograd.Function):
    """Per-row cross-entropy of x @ w.T (+ bias, cap, folded RMSNorm): one GEMM per wide chunk
    forward (reductions only); backward three per row block (recompute, dx, dw), or with
    `low_memory` two per chunk (dw) and two per row block (dx)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, w: torch.Tensor, target: torch.Tensor, bias: torch.Tensor | None,
                norm_weight: torch.Tensor | None, ignore_index: int, reduction: str,
                label_smoothing: float, softcap: float | None, chunk_size: int | None,
                low_memory: bool, norm_eps: float) -> torch.Tensor:
        h, lead = as_rows(x)
        vocab = w.shape[0]
        stat = _accumulator_dtype(x)
        target = target.reshape(-1)
        valid = target != ignore_index
        target_f = torch.where(valid, target, -1).to(stat)
        if norm_weight is None:
            a, rstd = h, None
        else:
            outs = NORM_INPUT.map(h, g=norm_weight)
            a, rstd = outs["output"], torch.rsqrt(outs["ss"] / h.shape[1] + norm_eps)
        prog = forward_program(bias is not None, rstd is not None, softcap is not None)
        names = ["lse", "t", "s"] if label_smoothing else ["lse", "t"]
        lse = t = s = None
        chunk, _ = block_shapes(*h.shape, vocab, chunk_size)
        for c0, c1 in _spans(vocab, FORWARD_CHUNK_FACTOR * chunk):
            outs = prog(a, w[c0:c1].T, outputs=names, target=target_f, offset=float(c0),
                        **present(bias=None if bias is None else bias[c0:c1], rstd=rstd, cap=softcap))
            if lse is None:
                lse, t, s = outs["lse"], outs["t"], outs.get("s")
            else:
                lse = torch.logaddexp(lse, outs["lse"])
                t = t + outs["t"]
                s = s + outs["s"] if label_smoothing else None
        loss = lse - (1.0 - label_smoothing) * t
        if label_smoothing:
            loss = loss - (label_smoothing / vocab) * s
        loss = torch.where(valid, loss, 0.0)
        weight = valid.to(stat)   # dL/dloss_i: alpha for an upstream gradient of 1
        if reduction == "mean":
            weight = weight / valid.sum()
        result = (loss.sum() if reduction == "sum" else (loss * weight).sum() if reduction == "mean"
                  else loss.reshape(lead))
        ctx.save_for_backward(h, a, w, bias, norm_weight, target_f, lse, rstd, weight)
        ctx.options = (label_smoothing, softcap, chunk_size, low_memory, lead)
        return result

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        h, a, w, bias, g, target_f, lse, rstd, weight = ctx.saved_tensors
        label_smoothing, softcap, chunk_size, low_memory, lead = ctx.options
        need_x, need_w, _, need_b, need_g = ctx.needs_input_grad[:5]
        (tokens, hidden), vocab, norm = h.shape, w.shape[0], g is not None
        alpha = grad.reshape(-1).to(weight.dtype) * weight
        chunk, rows = block_shapes(tokens, hidden, vocab, chunk_size, low_memory)
        prog = grad_program(bias is not None, norm, softcap is not None)
        by_chunk = low_memory and (need_w or need_b)   # dw and db from a pass of their own
        # One buffer holds every block; rows padded to 16 bytes so TMA can read G and G.T.
        pad = 16 // a.element_size()

        def padded(width: int) -> int:
            return -(-width // pad) * pad

        buf = a.new_empty(max(tokens * padded(chunk) * by_chunk, rows * padded(vocab)))

        def block(r0: int, r1: int, c0: int, c1: int, names: list[str]) -> dict[str, torch.Tensor]:
            """GRAD for rows [r0, r1) x columns [c0, c1) of the logits, into the buffer."""
            out = buf[:(r1 - r0) * padded(c1 - c0)].view(r1 - r0, padded(c1 - c0))[:, :c1 - c0]
            return prog(a[r0:r1], w[c0:c1].T, out=out, outputs=names, target=target_f[r0:r1],
                        offset=float(c0), lse=lse[r0:r1], alpha=alpha[r0:r1],
                        hit=1.0 - label_smoothing, smooth=label_smoothing / vocab,
                        **present(bias=None if bias is None else bias[c0:c1],
                                  rstd=None if rstd is None else rstd[r0:r1], cap=softcap))

        dw = torch.empty_like(w) if need_w else None
        db = None
        if by_chunk:   # chunks of the vocabulary, every row: dw_c and db_c complete
            db_parts = []
            for c0, c1 in _spans(vocab, chunk):
                outs = block(0, tokens, c0, c1, ["output"] + ["db"] * need_b)
                if need_w:   # a plain GEMM into contiguous rows of dw: cuBLAS (ops/common.py)
                    torch.matmul(outs["output"].T, a, out=dw[c0:c1])
                db_parts.append(outs.get("db"))
            db = torch.cat(db_parts) if need_b else None
        dx = torch.empty_like(h) if need_x else None
        dg = dw_sum = None
        blocks = _spans(tokens, rows) if need_x or need_g or ((need_w or need_b) and not by_chunk) else []
        # cuBLAS runs a K = V that is not a multiple of 16 bytes (GPT-2's 50257) in its slow
        # unaligned kernels: the dx GEMM takes the aligned first `whole` columns, added in float32
        # (beta = 1) to the few last ones' product, which is rounded on its own (a tiny K: its
        # rounding is negligible next to dx's one).
        whole = vocab // pad * pad
        for i, (r0, r1) in enumerate(blocks):   # blocks of rows, the whole vocabulary
            names = ["output"] + ["r"] * (norm and (need_x or need_g)) + ["db"] * (need_b and not by_chunk)
            outs = block(r0, r1, 0, vocab, names)
            g_b = outs["output"]
            if "db" in outs:
                db = outs["db"] if db is None else db + outs["db"]
            if need_w and not by_chunk:   # dw += G_b.T @ x_b, float32 until the last block
                if len(blocks) == 1:
                    torch.matmul(g_b.T, a, out=dw)
                elif i == 0:
                    dw_sum = PLAIN(g_b.T, a[r0:r1], out_dtype=_accumulator_dtype(a))["output"]
                elif i < len(blocks) - 1:
                    weight_grad(g_b, a[r0:r1], into=dw_sum)
                else:
                    ADD_PARTIAL(g_b.T, a[r0:r1], partial=dw_sum, out=dw)
            if not (need_x or need_g):
                continue
            if not norm:   # dx_b complete, a plain GEMM into rows b of dx: cuBLAS
                dx_b = dx[r0:r1]
                if whole < vocab:
                    torch.matmul(g_b[:, whole:], w[whole:], out=dx_b)
                    dx_b.addmm_(g_b[:, :whole], w[:whole])
                else:
                    torch.matmul(g_b, w, out=dx_b)
                continue
            k = rstd[r0:r1] * rstd[r0:r1] * outs["r"] / hidden
            final = DX_NORM(g_b, w, out=None if dx is None else dx[r0:r1],
                            outputs=["output"] * need_x + ["dg"] * need_g, g=g, k=k, h=h[r0:r1])
            if need_g:
                dg = final["dg"] if dg is None else dg + final["dg"]
        dx = dx.reshape(*lead, hidden) if need_x else None
        db = db.to(bias.dtype) if need_b else None
        dg = dg.to(g.dtype) if need_g else None
        return dx, dw, None, db, dg, None, None, None, None, None, None, None


def _accumulator_dtype(x: torch.Tensor) -> torch.dtype:
    """Partial sums across blocks: float32, float64 for float64 operands."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def linear_cross_entropy(x: torch.Tensor, w: torch.Tensor, target: torch.Tensor,
                         bias: torch.Tensor | None = None, ignore_index: int = -100,
                         reduction: str = "mean", label_smoothing: float = 0.0,
                         softcap: float | None = None, chunk_size: int | None = None,
                         norm_weight: torch.Tensor | None = None, norm_eps: float = 1e-6,
                         low_memory: bool = False) -> torch.Tensor:
    """cross_entropy(x @ w.T + bias, target) without the logits in memory.

    x [..., H]; w [V, H]; target [...] integer classes; bias [V]. `softcap` c replaces each logit
    by c·tanh(logit / c); `norm_weight` g [H] applies an RMSNorm with weight g and `norm_eps` to
    x first (folded into the GEMMs). The backward materializes the logits' gradient in blocks of
    rows (and recomputes the logits for them: see the module's docstring); `chunk_size` sets a
    block to `chunk_size`·T logits (default: about 2**26). `low_memory=True` keeps the peak
    memory at or below Liger Kernel's (blocks no larger than its chunks and no float32 [V, H]
    accumulator for dw) for one more GEMM of T·H·V; `chunk_size` is then also the number of
    vocabulary columns per chunk of its dw pass. `ignore_index`,
    `reduction` and `label_smoothing` as in torch.nn.functional.cross_entropy. Returns a scalar
    ("mean", "sum") or a loss per row of x's leading shape ("none"), in float32 (float64 for
    float64 x): the precision of the statistics, as autocast computes cross-entropy; a bf16 loss
    would carry a 2**-9 rounding.
    """
    _check_tensor(x, "x", "[..., H]")
    if x.dim() == 0 or not x.is_floating_point():
        raise LaunchError(f"x must be a floating-point tensor [..., H], got {checks.describe(x)}")
    hidden = x.shape[-1]
    _check_tensor(w, "w", "[V, H]")
    if w.dim() != 2 or w.shape[1] != hidden or w.dtype != x.dtype:
        raise LaunchError(f"w must be [V, H = {hidden}] of x's dtype {x.dtype}, got {checks.describe(w)}")
    vocab = w.shape[0]
    if not 0 < vocab < MAX_VOCAB:
        raise LaunchError(f"w has V = {vocab} rows; expected 0 < V < 2**24 (targets are compared as "
                          f"float32)")
    _check_tensor(target, "target", "[...] of integer classes")
    if target.shape != x.shape[:-1] or target.is_floating_point() or target.dtype == torch.bool:
        raise LaunchError(f"target must be an integer tensor of shape {list(x.shape[:-1])} (x's "
                          f"leading shape), got {checks.describe(target)}")
    for name, vec, size in (("bias", bias, vocab), ("norm_weight", norm_weight, hidden)):
        if vec is not None:
            _check_tensor(vec, name, f"[{size}]")
            if vec.shape != (size,) or not vec.is_floating_point():
                raise LaunchError(f"{name} must be a floating-point tensor of shape [{size}], got "
                                  f"{checks.describe(vec)}")
    for name, t in (("w", w), ("target", target), ("bias", bias), ("norm_weight", norm_weight)):
        if t is not None and t.device != x.device:
            raise LaunchError(f"{name} is on {t.device} but x is on {x.device}")
    if reduction not in REDUCTIONS:
        raise LaunchError(f"reduction must be one of {', '.join(map(repr, REDUCTIONS))}; got "
                          f"{reduction!r}")
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, int):
        raise LaunchError(f"ignore_index must be an int, got {ignore_index!r}")
    if not _is_number(label_smoothing) or not 0.0 <= label_smoothing <= 1.0:
        raise LaunchError(f"label_smoothing must be a number in [0, 1], got {label_smoothing!r}")
    if softcap is not None and (not _is_number(softcap) or not softcap > 0):
        raise LaunchError(f"softcap must be None or a positive number, got {softcap!r}")
    if chunk_size is not None and (isinstance(chunk_size, bool) or not isinstance(chunk_size, int)
                                   or chunk_size < 1):
        raise LaunchError(f"chunk_size must be None or a positive int, got {chunk_size!r}")
    if not _is_number(norm_eps) or not norm_eps >= 0:
        raise LaunchError(f"norm_eps must be a non-negative number, got {norm_eps!r}")
    if not isinstance(low_memory, bool):
        raise LaunchError(f"low_memory must be a bool, got {low_memory!r}")
    args = (x, w, target, bias, norm_weight, ignore_index, reduction, float(label_smoothing),
            None if softcap is None else float(softcap), chunk_size, low_memory, float(norm_eps))
    from ..integrations import compile as custom  # here: that module imports this one
    if custom.routed():   # inside torch.compile: the custom op coda::linear_cross_entropy
        return custom.linear_cross_entropy_op(*args)
    return LinearCrossEntropyFunction.apply(*args)


def _check_tensor(x: object, name: str, shape: str) -> None:
    if not isinstance(x, torch.Tensor):
        raise LaunchError(f"{name} must be a tensor {shape}, got {checks.describe(x)}")


def _is_number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)

