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

The gradients come from the logits' gradient G, materialized one block of rows at a time in
x's dtype: a block [rows, V] spans the vocabulary, so it gives its rows of dx complete (one
GEMM), and its share of dw (a sum over the tokens) is added into a float32 [V, H] accumulator
(one GEMM each, float32 `+=` in the epilogue). Partial sums are never rounded to x's dtype (bf16
partials would grow the error with the number of blocks: about 3x eager PyTorch's at 8).

A scalar loss ("mean", "sum") that needs a gradient forms them in the forward, for an upstream
gradient of 1 (α = the rows' loss weights), and the backward multiplies by the real one: three
GEMMs of T·H·V, as many as eager PyTorch.

  forward   Z_b, lse, t, s = FORWARD(b)  per block b of rows: GEMM x_b @ w.T; epilogue: bias,
                          cap, the block's complete statistics lse = row_logsumexp(ℓ), t =
                          row_sum(where(col == target, ℓ, 0)), s = row_sum(ℓ) (with smoothing),
                          and Z_b, the GEMM's result, stored in x's dtype (as eager's logits are);
                          the statistics are those of Z_b too (ROUNDING: below).
            G_b, db_b   = GRAD.map(Z_b) in place: dz as above (lse, target and α row operands).
            dx_b        = G_b @ w, written straight into rows b of dx: complete, one GEMM.
            dw         += G_b.T @ x_b   (float32 accumulator, kept until the backward).
  backward  dx·g, dw·g (SCALE: one rounding to dw's dtype), db·g, dg·g for the upstream g.

By default (`exponential=True`), without bias, cap, norm or smoothing (GPT-2's head) and not
float16, the forward stores exp(ℓ - c) instead of Z_b, c per row a reference known before the
block's GEMM, and needs no gradient map: then

    G = r ⊙_row E - α ⊙_row onehot(target),   E = exp(ℓ - c),   r = α·exp(c - lse),

and as G = r ⊙_row E' with E' = E - exp(lse - c)·onehot(target), one element a row changed,

  forward   c           = REFERENCE(b): the log-sum-exp of the block's first REFERENCE_COLUMNS
                          logits (a GEMM of H·REFERENCE_COLUMNS per row), at most ln 256 above
                          their maximum, never below it: the row's largest logit is at least
                          c - 6, so E keeps it and everything within e^-60 of it in range.
            E_b, lse, t = FORWARD(b) storing E = exp(ℓ - c), summed by rows: lse = c + log Σ E
                          (one exponential an element for both); should a row's lse exceed c by
                          more than EXP_HEADROOM (E or Σ E would near float32's largest, e^88),
                          the block's lse is formed by the general FORWARD and E again with
                          c = lse (E ≤ 1), decided on the device (the two launches' m_limit is 0
                          or the block's rows: no synchronization).
            E'_b        = E_b, the target's element set to exp(t - c) - exp(lse - c) (in float32
                          from the statistics, rounded once: no cancellation in bf16).
            dx_b        = r ⊙_row (E'_b @ w) (cuBLAS's GEMM, then the row scale as a map; for
                          a V not a multiple of 16, cuBLAS's GEMM over the first V - V % 16
                          columns and the last ones' product added in the scale's map,
                          `tail_and_scale`, where cuBLAS would run them in an unaligned kernel),
            dw         += E'_b.T @ (r ⊙_row x_b) (x's rows scaled by a map: [rows, H]).
E is formed from the rounded logits (below) and rounded once more when stored: G = r ⊙ E
carries E's rounding, where eager and the general path round G itself once. E and E'_b @ w need
float32's exponent range: a float16 head takes the general path.

Every path rounds the GEMM's result to x's dtype (ROUNDING) before it forms a logit, as eager
PyTorch's bf16 or fp16 logits are: the statistics of the forward and the
gradient of the backward (or of the map over the stored Z_b) are those of the same rounded
logits, so each row's softmax sums to one. With lse from the float32 logits and exp(ℓ - lse)
from the rounded ones it did not: a row's dominant probability was off by its logit's rounding
(|ℓ|·2^-9 in bf16) where eager's is off by that times 1 - p, and at the target of a confident
row the gradient's sign could flip (docs/ops.md, "Rounded logits").

Otherwise (reduction "none", no gradient wanted, or inside torch.compile without one) the
forward stores no tile, and the backward recomputes the GEMM: four GEMMs.

  forward   lse, t, s   = FORWARD(c)  GEMM x @ w_c.T over wide chunks of columns, launched with
                          outputs= naming the statistics only: the logits never reach memory.
                          The chunks' statistics combine in O(T): lse by one logsumexp over
                          their stack, t and s by sums. Saved for backward: x, w, bias, target,
                          lse (O(T) beyond them).
  backward  G_b, db_b   = GRAD(b)  for each block b of rows, the whole vocabulary: GEMM x_b @ w.T
                          again; epilogue: dz. G_b [rows, V].
            dx_b, dw    as above; the last block's dw GEMM adds the accumulator and rounds once.

A block holds about 2**29 logits (1 GiB in bf16) and at least 1024 rows, the K of the dw
GEMM: each block's dw GEMM reads and writes the float32 accumulator once, in an epilogue that
does not overlap its MMAs (a float32 `+=` does not run in the ping-pong kernel), so longer
blocks spread that over more MMA work: its 8·V·H bytes against the block's 6·rows·V·H flops
are, at ~700 TFLOP/s and ~3.5 TB/s, about 270/rows of the block's GEMM time, whatever V and H
(GPT-2's vocabulary: 10624 rows, 2 passes at 16384 tokens; LLaMA-1B's 128256: 4096 rows, 4
passes). The accumulator (4·V·H bytes) and the block are what this costs in memory beyond the
gradients themselves.

`low_memory=True` keeps the peak at or below Liger's instead (blocks of at most T·H·V/(V + H)
logits, no larger than Liger's chunk of ⌈T / ⌈V/H⌉⌉ rows (a power of two) × V, and no [V, H]
accumulator) at the price of five GEMMs: the statistics-only forward, and a backward in which
dw is completed per chunk of vocabulary columns, over all rows, recomputing the logits twice:

  backward  G_c, db_c   = GRAD(c)  for each chunk c of `chunk` vocabulary columns, all rows.
            dw_c        = G_c.T @ x, written straight into rows c of dw: complete, one GEMM.
            G_b, dx_b   as above, without the dw and db shares.

With `norm_weight` g the head is preceded by an RMSNorm that is folded into the GEMMs: x is the
un-normalized hidden state h, x̂ = rstd ⊙ h ⊙ g with rstd = rsqrt(mean(h²) + eps), and

    z = rstd ⊙_row ((h ⊙ g) @ w.T) + bias.

  forward   hg, ss      = NORM_INPUT.map(h): output = h ⊙ g, ss = row_sum(h²) (one pass over h);
                          rstd = rsqrt(ss / H + eps) is O(T); hg is the GEMMs' A operand, and
                          every epilogue above multiplies by the row operand rstd.
  gradient G' = dz ⊙ rstd (dL/d(hg @ w.T)) from GRAD (in float16 dz itself, rstd then applied
            to q below and to hg's rows for dw: `Blocks.unscaled`); dw = G'.T @ hg; in the row blocks GRAD
            also gives r = row_sum(G' ⊙ (hg @ w.T)) (complete: the block spans the vocabulary),
            and with q = G'_b @ w (= rstd·dx̂) the epilogue of the dx GEMM (dx_norm_program) writes
            dh = g ⊙ q - (rstd² r / H) ⊙ h and dg_b = col_sum(q ⊙ h), summed over blocks.

Targets ride as float row operands (exact below 2**24, so V must be smaller); an ignored row gets
the target -1, which matches no column. A target outside [0, V) other than `ignore_index` is an
error: on the CPU `linear_cross_entropy` raises it; on a GPU, where finding it would synchronize
with the device, its row's loss weight is NaN, so the loss and the gradients it reaches are NaN
(never a plausible number; the kernels read and write only inside [0, V) for it).
"""

from __future__ import annotations

import functools
import math

import torch

from .. import compile as compile_program
from ..errors import LaunchError
from ..runtime.program import Program, default_backend
from . import checks
from .common import (
    ACCUMULATE,
    ADD_PARTIAL,
    PLAIN,
    ROUNDING,
    SCALE_ROWS,
    as_rows,
    follows_autocast,
    op_function,
    present,
    weight_grad,
)
from .embedding import sole_use

REDUCTIONS = ("mean", "sum", "none")
#: Chunk widths are multiples of this (half a 256-wide GEMM tile) when that wide, except the last.
CHUNK_ALIGN = 128
#: Row blocks are multiples of this many rows when that tall, except the last.
ROW_ALIGN = 16
#: The default backward's blocks hold about this many logits (1 GiB in bf16): fwd+bwd on the
#: H200 with 2**27 / 2**28 / 2**29 (benchmarks/results/session19/ce): 16384 x 2048 x 128256
#: 50.6 / 45.2 / 43.2 ms, GPT-2's head 7.77 / 7.48 / 6.98, 8192 x 4096 x 32000 10.8 / 10.1 / 10.1...
BLOCK_LOGITS = 1 << 29
#: ...and at least this many rows: the K of the GEMM that adds a block's dw into the float32
#: accumulator, whose read and write of it, once a block, are spread over that much MMA work.
MIN_BLOCK_ROWS = 1024
#: The forward stores no [T, chunk] block, only per-tile partial statistics (12-16 bytes per row
#: and 128 columns, 1/20 of the backward's bf16 block): its chunks are this many backward chunks
#: wide. Fewer chunks, fewer launches.
FORWARD_CHUNK_FACTOR = 16
#: A block's rows are padded to a multiple of this many elements: a 16-byte aligned stride, which
#: TMA needs to write the block and read G and G.T, and one Triton specializes as divisible by 16,
#: which the gradient map's vectorized loads and stores need (GPT-2's 50257 columns: 2.7 TB/s at
#: a stride of 50264, 3.1 at 50272, on the H200).
ROW_PAD = 16
#: Targets travel as float32: exact below 2**24.
MAX_VOCAB = 2**24
#: The exponential path's reference c of a row is the log-sum-exp of this many first logits...
REFERENCE_COLUMNS = 256
#: ...and a block whose lse exceeds some row's c by more than this is formed again from c = lse.
EXP_HEADROOM = 80.0

REFERENCE = compile_program("EPILOGUE ce_reference() { output = input; c = row_logsumexp(input); }")


@functools.cache
def exp_forward_program(rounding: str | None) -> Program:
    """The exponential path's forward: E = exp(logit - c) is stored and summed (lse = c + log Σ E:
    one exponential an element serves both), t is the target's logit; the logits rounded as in
    `forward_program`, so that this path's gradient is that of the same logits as the others'."""
    return compile_program("EPILOGUE ce_forward_exp(target: row, offset: scalar, c: row) {"
                           f" {_rounded_input(rounding)}"
                           " e = exp(zr - c); output = e; se = row_sum(e);"
                           " t = row_sum(where(col_index() + offset == target, zr, 0.0)); }")

# h ⊙ g (the GEMMs' A operand when an RMSNorm is folded in) and h's sum of squares, in one pass.
NORM_INPUT = compile_program("EPILOGUE ce_norm_input(g: col) {"
                             " output = input * g; ss = row_sum(input * input); }")


def _logit(bias: bool, norm: bool, softcap: bool, rounding: str | None) -> list[str]:
    """DSL statements computing `zr` (input rounded by `rounding`, or input itself), `z` (with
    the norm's row scale and the bias) and `logit`; with a cap also `th` = tanh(z / cap), whose
    derivative the backward reuses."""
    z = "zr" + " * rstd" * norm + " + bias" * bias
    lines = [_rounded_input(rounding)]
    if softcap:
        return [*lines, f"z = {z};", "th = tanh(z / cap);", "logit = cap * th;"]
    return [*lines, f"logit = {z};"]


def _rounded_input(rounding: str | None) -> str:
    """The DSL statement of `zr`: the GEMM's result rounded by `rounding` (ROUNDING), or as is."""
    return f"zr = {rounding}(input);" if rounding else "zr = input;"


def _params(bias: bool, norm: bool, softcap: bool) -> list[str]:
    return ["bias: col"] * bias + ["rstd: row"] * norm + ["cap: scalar"] * softcap + [
        "target: row", "offset: scalar"]


@functools.cache
def forward_program(bias: bool, norm: bool, softcap: bool, rounding: str | None) -> Program:
    """The per-row statistics of one chunk (and, stored on request, the GEMM's result, from which
    `grad_program` as a map forms the logits' gradient); `offset` is the chunk's first column.
    It stores the rounded result, the bits a store of the input holds (storing the input itself
    kept both alive: ptxas spilled 520 bytes in the ping-pong kernel). For example (True, False,
    True, "round_bf16") is
        EPILOGUE ce_forward(bias: col, cap: scalar, target: row, offset: scalar) {
          zr = round_bf16(input); z = zr + bias; th = tanh(z / cap); logit = cap * th;
          lse = row_logsumexp(logit);
          t = row_sum(where(col_index() + offset == target, logit, 0.0));
          s = row_sum(logit);
          output = zr;         # stored only by the forward that also forms the gradients
        }
    """
    body = [*_logit(bias, norm, softcap, rounding),
            "lse = row_logsumexp(logit);",
            "t = row_sum(where(col_index() + offset == target, logit, 0.0));",
            "s = row_sum(logit);",
            "output = zr;"]
    return compile_program(f"EPILOGUE ce_forward({', '.join(_params(bias, norm, softcap))}) "
                           f"{{ {' '.join(body)} }}")


@functools.cache
def grad_program(bias: bool, norm: bool, softcap: bool, rounding: str | None,
                 unscaled: bool = False) -> Program:
    """The logits' gradient of one block, from the GEMM or, as a map, from its stored result
    (already rounded: rounding it again changes nothing): `hit` = 1 - ε, `smooth` = ε / V,
    `alpha` the rows' loss weights, `lse` from `forward_program` with the same `rounding`. For
    example (True, True, False, "round_bf16") is
        EPILOGUE ce_grad(bias: col, rstd: row, target: row, offset: scalar, lse: row,
                         alpha: row, hit: scalar, smooth: scalar) {
          zr = round_bf16(input); logit = zr * rstd + bias;
          dz = (exp(logit - lse) - where(col_index() + offset == target, hit, 0.0) - smooth)
               * alpha;
          db = col_sum(dz);
          output = dz * rstd;
          r = row_sum(output * zr);
        }
    With `unscaled` (float16 with a norm: `Blocks.unscaled`) the stored gradient is dz itself
    and `r = row_sum(dz * rstd * zr)`.
    """
    params = [*_params(bias, norm, softcap), "lse: row", "alpha: row", "hit: scalar",
              "smooth: scalar"]
    dlogit = "(exp(logit - lse) - where(col_index() + offset == target, hit, 0.0) - smooth) * alpha"
    body = [*_logit(bias, norm, softcap, rounding),
            f"dz = {dlogit} * (1.0 - th * th);" if softcap else f"dz = {dlogit};",
            "db = col_sum(dz);" * bias,
            "output = dz * rstd;" if norm and not unscaled else "output = dz;",
            ("r = row_sum(output * rstd * zr);" if unscaled else "r = row_sum(output * zr);") * norm]
    return compile_program(f"EPILOGUE ce_grad({', '.join(params)}) {{ {' '.join(body)} }}")


# The gradients formed in the forward for an upstream gradient of 1, times the real one.
SCALE = compile_program("EPILOGUE ce_scale(s: scalar) { output = input * s; }")

@functools.cache
def dx_norm_program(unscaled: bool) -> Program:
    """The dx GEMM's epilogue with a folded RMSNorm: q = G'_b @ w (with `unscaled`, where G_b is
    stored without rstd: Blocks.unscaled, q = rstd ⊙_row (G_b @ w)), dh = g ⊙ q - k ⊙ h with the
    row k = rstd² r / H, and dg_b = col_sum(q ⊙ h). Without the norm dx_b is a plain GEMM
    (cuBLAS)."""
    params, q = ("g: col, k: row, h: tile, rstd: row", "input * rstd") if unscaled else (
        "g: col, k: row, h: tile", "input")
    return compile_program(f"EPILOGUE ce_dx_norm({params}) {{"
                           f" q = {q}; output = g * q - k * h; dg = col_sum(q * h); }}")


@functools.cache
def tail_and_scale(columns: int) -> Program:
    """The exponential path's dx map when cuBLAS ran only the aligned columns of G_b @ w: it adds
    the few last columns' product, g_j ⊗ w_j (row operand gj: column j of the tail of G_b; col
    operand wj: row j of the tail of w), in float32, and scales each row by c:

        EPILOGUE tail_and_scale(c: row, g0: row, w0: col, ...) { output = (input + g0 * w0 + ...) * c; }

    in place of cuBLAS's product of the tail alone (its unaligned kernel: K of 1 to 15) and a
    second GEMM adding the aligned part to it."""
    params = ["c: row"] + [f"g{j}: row, w{j}: col" for j in range(columns)]
    tail = "".join(f" + g{j} * w{j}" for j in range(columns))
    return compile_program(f"EPILOGUE tail_and_scale({', '.join(params)}) {{ output = (input{tail}) * c; }}")


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


@op_function
class LinearCrossEntropyFunction(torch.autograd.Function):
    """Per-row cross-entropy of x @ w.T (+ bias, cap, folded RMSNorm). With `grads_in_forward`
    (a scalar loss, a gradient wanted, not `low_memory`) the forward forms the gradients for an
    upstream gradient of 1, per block of rows (three GEMMs of T·H·V in all), and the backward
    scales them; otherwise the forward computes statistics only and the backward does the rest
    (four GEMMs; five with `low_memory`)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, w: torch.Tensor, target: torch.Tensor, bias: torch.Tensor | None,
                norm_weight: torch.Tensor | None, ignore_index: int, reduction: str,
                label_smoothing: float, softcap: float | None, chunk_size: int | None,
                low_memory: bool, norm_eps: float, grads_in_forward: bool,
                skip_ignored: bool = False, exponential: bool = True) -> torch.Tensor:
        h, lead = as_rows(x)
        (tokens, hidden), vocab = h.shape, w.shape[0]
        stat = _accumulator_dtype(x)
        target = target.reshape(-1)
        valid = target != ignore_index
        need = list(ctx.needs_input_grad[:2]) + list(ctx.needs_input_grad[3:5])
        ctx.grads_in_forward = grads_in_forward and any(need)
        order = count = None
        if skip_ignored and ctx.grads_in_forward:   # the rows that count first, `count` of them
            order = torch.sort((~valid).to(torch.int8), stable=True).indices
            count = valid.sum(dtype=torch.int32).reshape(1)
            h, target, valid = h[order], target[order], valid[order]
        target_f = torch.where(valid, target, -1).to(stat)
        # dL/dloss_i, alpha for an upstream gradient of 1: 1 where the row counts (over their
        # number for "mean"), 0 where it is ignored, NaN where its target is outside [0, V)
        counts = torch.where(outside_vocabulary(target, valid, vocab), float("nan"), valid.to(stat))
        n_valid = valid.sum()   # none: a NaN mean, as torch's, but zero gradients, as torch's
        weight = counts / n_valid.clamp_min(1) if reduction == "mean" else counts
        if norm_weight is None:
            a, rstd = h, None
        else:
            outs = NORM_INPUT.map(h, g=norm_weight, m_limit=count)
            # no features: the logits are the bias, whatever the (undefined) scale of their rows
            rstd = torch.rsqrt(outs["ss"] / hidden + norm_eps) if hidden else torch.ones_like(outs["ss"])
            a = outs["output"]
        blocks = Blocks(h, a, w, bias, norm_weight, target_f, rstd, label_smoothing, softcap,
                        *block_shapes(tokens, hidden, vocab, chunk_size, low_memory), count, exponential)
        ctx.options = (label_smoothing, softcap, chunk_size, low_memory, lead)
        if ctx.grads_in_forward:
            lse, t, s, grads = blocks.forward_with_grads(weight, need)
            if order is not None and grads[0] is not None:   # dx back in x's row order
                grads = (torch.empty_like(grads[0]).index_copy_(0, order, grads[0]), *grads[1:])
        else:
            lse, t, s = blocks.statistics(label_smoothing > 0)
            grads = (None, None, None, None)
        loss = lse - (1.0 - label_smoothing) * t
        if label_smoothing:
            loss = loss - (label_smoothing / vocab) * s
        loss = torch.where(valid, loss * counts, 0.0)
        result = (loss.sum() if reduction == "sum" else loss.sum() / n_valid if reduction == "mean"
                  else loss.reshape(lead))
        ctx.dtypes = [None if t is None else t.dtype for t in (w, bias, norm_weight)]
        if ctx.grads_in_forward:   # the backward needs nothing else (not even hg)
            ctx.save_for_backward(*grads)
        else:
            ctx.save_for_backward(h, a, w, bias, norm_weight, target_f, lse, rstd, weight)
        return result

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        label_smoothing, softcap, chunk_size, low_memory, lead = ctx.options
        need = list(ctx.needs_input_grad[:2]) + list(ctx.needs_input_grad[3:5])
        w_dtype, bias_dtype, g_dtype = ctx.dtypes
        if ctx.grads_in_forward:   # formed for an upstream gradient of 1: times the real one
            dx, dw_sum, db, dg = ctx.saved_tensors
            # x's dtype, the product in float32 (a map: `dx * grad` runs PyTorch's unvectorized
            # kernel for a 0-dim CUDA operand and rounds grad to bf16 first; 46 µs at GPT-2's head)
            dx = SCALE.map(dx, out_dtype=dx.dtype, s=grad)["output"] if need[0] else None
            dw = SCALE.map(dw_sum, out_dtype=w_dtype, s=grad)["output"] if need[1] else None
            db = db * grad if need[2] else None
            dg = dg * grad if need[3] else None
        else:
            h, a, w, bias, g, target_f, lse, rstd, weight = ctx.saved_tensors
            (tokens, hidden), vocab = h.shape, w.shape[0]
            blocks = Blocks(h, a, w, bias, g, target_f, rstd, label_smoothing, softcap,
                            *block_shapes(tokens, hidden, vocab, chunk_size, low_memory))
            alpha = grad.reshape(-1).to(weight.dtype) * weight
            dx, dw, db, dg = blocks.backward(lse, alpha, need, low_memory)
        dx = dx.reshape(*lead, dx.shape[-1]) if need[0] else None
        dw = sole_use(dw) if need[1] else None   # fresh: a tied table's gradient may add into it
        db = db.to(bias_dtype) if need[2] else None
        dg = dg.to(g_dtype) if need[3] else None
        return dx, dw, None, db, dg, None, None, None, None, None, None, None, None, None, None


class Blocks:
    """The GEMMs of one cross-entropy over blocks of logits: `chunk` vocabulary columns (all
    rows) or `rows` rows (the whole vocabulary), materialized one at a time in one buffer."""

    def __init__(self, h, a, w, bias, g, target_f, rstd, label_smoothing: float,
                 softcap: float | None, chunk: int, rows: int, count: torch.Tensor | None = None,
                 exponential: bool = True):
        self.h, self.a, self.w, self.bias, self.g, self.target_f, self.rstd = (
            h, a, w, bias, g, target_f, rstd)
        self.label_smoothing, self.softcap, self.chunk, self.rows = label_smoothing, softcap, chunk, rows
        self.count = count   # only the first `count` rows count (on the device): the rest are skipped
        self.norm = g is not None
        self.rounding = ROUNDING.get(a.dtype)
        # what forward_program and grad_program are made for: bias, norm, cap, rounding
        self.variant = (bias is not None, self.norm, softcap is not None, self.rounding)
        # float16 with a norm stores dz, not G' = dz ⊙ rstd: rms(h) times smaller than eager's
        # logit gradient, G' put its low bits in float16's subnormals where rms(h) is in the tens
        # to hundreds (docs/ops.md). rstd then scales q in the dx GEMM's epilogue and hg's rows in
        # dw's operand (`dw_operand`: one more [T, H] pass). bfloat16 has float32's exponent range.
        self.unscaled = self.norm and a.dtype == torch.float16
        # (grad_program's arguments: `unscaled` only when set, so that every other head finds
        # the program cached under the four arguments the forward's variant has)
        self.grad_variant = (*self.variant, True) if self.unscaled else self.variant
        self._dw_operand: torch.Tensor | None = None
        self.exp_wanted = exponential
        self.buf: torch.Tensor | None = None

    def dw_operand(self) -> torch.Tensor:
        """The A rows dw's GEMMs read against the stored gradient: hg (x without a norm), or
        with `unscaled` rstd ⊙_row hg, made once."""
        if not self.unscaled:
            return self.a
        if self._dw_operand is None:
            self._dw_operand = SCALE_ROWS.map(self.a, c=self.rstd)["output"]
        return self._dw_operand

    def _limit(self, r0: int, r1: int) -> torch.Tensor | None:
        """How many of rows [r0, r1) count (the `m_limit` of the block's launches), or None."""
        return None if self.count is None else (self.count - r0).clamp(0, r1 - r0)

    def _operands(self, r0: int, r1: int, c0: int, c1: int) -> dict:
        """The operands the programs share, for rows [r0, r1) and columns [c0, c1)."""
        bias, rstd = self.bias, self.rstd
        return dict(target=self.target_f[r0:r1], offset=float(c0),
                    **present(bias=None if bias is None else bias[c0:c1],
                              rstd=None if rstd is None else rstd[r0:r1], cap=self.softcap))

    def _padded(self, width: int) -> int:
        return -(-width // ROW_PAD) * ROW_PAD

    def _reserve(self, *blocks: tuple[int, int]) -> None:
        """One buffer for every block of the passes to come: the largest of these [rows, width]."""
        self.buf = self.a.new_empty(max(rows * self._padded(width) for rows, width in blocks))

    def _block(self, r0: int, r1: int, c0: int, c1: int) -> torch.Tensor:
        """A [r1 - r0, c1 - c0] view of the buffer, its rows padded to ROW_PAD elements."""
        width = self._padded(c1 - c0)
        return self.buf[:(r1 - r0) * width].view(r1 - r0, width)[:, :c1 - c0]

    def _grad_operands(self, lse: torch.Tensor, alpha: torch.Tensor) -> dict:
        """GRAD's operands besides the shared ones, `lse` and `alpha` being the block's rows."""
        return dict(lse=lse, alpha=alpha, hit=1.0 - self.label_smoothing,
                    smooth=self.label_smoothing / self.w.shape[0])

    def statistics(self, smoothing: bool) -> tuple:
        """(lse, t, s): FORWARD over chunks of FORWARD_CHUNK_FACTOR·chunk columns, no tile stored.
        The chunks' lse combine in one logsumexp over their stack, rounded once: a chain of
        logaddexp rounds once per chunk, and a small hidden size makes many chunks (H = 2,
        V = 4000: 250, and the float32 loss's error 10x eager's)."""
        a, w = self.a, self.w
        prog = forward_program(*self.variant)
        names = ["lse", "t", "s"] if smoothing else ["lse", "t"]
        lses, t, s = [], None, None
        for c0, c1 in _spans(w.shape[0], FORWARD_CHUNK_FACTOR * self.chunk):
            outs = prog(a, w[c0:c1].T, outputs=names, **self._operands(0, a.shape[0], c0, c1))
            lses.append(outs["lse"])
            if t is None:
                t, s = outs["t"], outs.get("s")
            else:
                t = t + outs["t"]
                s = s + outs["s"] if smoothing else None
        lse = lses[0] if len(lses) == 1 else torch.logsumexp(torch.stack(lses), 0)
        return lse, t, s

    def forward_with_grads(self, weight: torch.Tensor, need: list[bool]) -> tuple:
        """(lse, t, s, (dx, dw, db, dg)) for an upstream gradient of 1 (alpha = weight): per
        block of rows, FORWARD stores the GEMM's result and the block's complete statistics,
        GRAD as a map turns it into the logits' gradient in place, then the dx and dw GEMMs.
        dw stays a float32 sum (scaled and rounded once by the backward)."""
        a, w = self.a, self.w
        vocab = w.shape[0]
        stats_prog, grad_prog = forward_program(*self.variant), grad_program(*self.grad_variant)
        names = ["output", "lse", "t"] + ["s"] * (self.label_smoothing > 0)
        stats = {name: [] for name in names[1:]}
        self._reserve((self.rows, vocab))

        def grad_block(r0: int, r1: int, grad_names: list[str], limit: torch.Tensor | None
                       ) -> dict[str, torch.Tensor]:
            out = self._block(r0, r1, 0, vocab)
            outs = stats_prog(a[r0:r1], w.T, out=out, outputs=names, m_limit=limit,
                              **self._operands(r0, r1, 0, vocab))
            for name in stats:
                stats[name].append(outs[name])
            return grad_prog.map(out, out=out, outputs=grad_names, m_limit=limit,
                                 **self._operands(r0, r1, 0, vocab),
                                 **self._grad_operands(outs["lse"], weight[r0:r1]))

        def exp_block(r0: int, r1: int, grad_names: list[str], limit: torch.Tensor | None
                      ) -> dict[str, torch.Tensor]:
            out = self._block(r0, r1, 0, vocab)
            outs = self._exp_forward(r0, r1, out, limit, weight[r0:r1])
            for name in stats:
                stats[name].append(outs[name])
            return outs

        grads = self._row_pass(exp_block if self.exponential() else grad_block, need,
                               _accumulator_dtype(a), by_chunk=False)
        lse, t, s = (torch.cat(stats[n]) if n in stats else None for n in ("lse", "t", "s"))
        return lse, t, s, grads

    def exponential(self) -> bool:
        """Whether the forward that forms the gradients takes the exponential path: asked for
        (`exponential=True`, the default) and open to this head (no bias, cap, norm or smoothing: the
        gradient is then a row scale of exp(ℓ - c) but for the target's element), and not
        float16 (E up to e^80 and E' @ w need float32's exponent range)."""
        return self.exp_wanted and not (self.bias is not None or self.norm or self.softcap is not None
                                        or self.label_smoothing or self.a.dtype == torch.float16)

    def _exp_forward(self, r0: int, r1: int, out: torch.Tensor, limit: torch.Tensor | None,
                     alpha: torch.Tensor) -> dict[str, torch.Tensor]:
        """The exponential path's block (module docstring): E' stored in `out`, and the
        statistics lse and t, and `scale` = r, by which the GEMMs that read E' scale its rows."""
        a, w, target = self.a[r0:r1], self.w, self.target_f[r0:r1]
        place = dict(target=target, offset=0.0)
        reference = REFERENCE(a, w[:REFERENCE_COLUMNS].T, outputs=["c"], m_limit=limit)["c"]
        exp_forward = exp_forward_program(self.rounding)
        outs = exp_forward(a, w.T, out=out, outputs=["output", "se", "t"], m_limit=limit, c=reference,
                           **place)
        lse, redo = exp_headroom(reference, outs["se"], limit)
        # the block again from c = lse (the general forward's) if a row's lse left the headroom
        # (m_limit = redo: no rows when none did)
        again = forward_program(*self.variant)(a, w.T, outputs=["lse"], m_limit=redo, **place)["lse"]
        exp_forward(a, w.T, out=out, outputs=["output"], m_limit=redo, c=again, **place)
        lse, scale = exp_patch(reference, lse, again, redo, outs["t"], target, alpha, out)
        return dict(output=out, lse=lse, t=outs["t"], scale=scale)

    def backward(self, lse: torch.Tensor, alpha: torch.Tensor, need: list[bool],
                 low_memory: bool) -> tuple:
        """(dx, dw, db, dg), db and dg in float32: GRAD recomputes each block's GEMM. With
        `low_memory`, dw and db come from chunks of vocabulary columns (complete per chunk)."""
        a, w = self.a, self.w
        vocab = w.shape[0]
        prog = grad_program(*self.grad_variant)

        def grad_block(r0: int, r1: int, names: list[str], limit: torch.Tensor | None = None,
                       c0: int = 0, c1: int = vocab):
            return prog(a[r0:r1], w[c0:c1].T, out=self._block(r0, r1, c0, c1), outputs=names,
                        m_limit=limit, **self._operands(r0, r1, c0, c1),
                        **self._grad_operands(lse[r0:r1], alpha[r0:r1]))

        by_chunk = low_memory and (need[1] or need[2])
        self._reserve((self.rows, vocab), *[(a.shape[0], self.chunk)] * by_chunk)
        dw = db = None
        if by_chunk:   # chunks of the vocabulary, every row: dw_c and db_c complete
            dw = torch.empty_like(w) if need[1] else None
            db_parts = []
            for c0, c1 in _spans(vocab, self.chunk):
                outs = grad_block(0, a.shape[0], ["output"] + ["db"] * need[2], None, c0, c1)
                if need[1]:   # a plain GEMM into contiguous rows of dw: cuBLAS (ops/common.py)
                    torch.matmul(outs["output"].T, self.dw_operand(), out=dw[c0:c1])
                db_parts.append(outs.get("db"))
            db = torch.cat(db_parts) if need[2] else None
        dx, dw_rows, db_rows, dg = self._row_pass(grad_block, need, w.dtype, by_chunk)
        return dx, dw if by_chunk else dw_rows, db if by_chunk else db_rows, dg

    def _row_pass(self, grad_block, need: list[bool], dw_dtype: torch.dtype, by_chunk: bool) -> tuple:
        """(dx, dw, db, dg) over blocks of rows: G_b = grad_block(r0, r1, names) spans the
        vocabulary, so dx_b is complete (one GEMM); dw, db and dg are summed over blocks in
        float32 (dw's last GEMM rounds it to `dw_dtype` when that is not float32). With
        `by_chunk` dw and db are someone else's: only dx and dg. With a `count` every launch
        of a block stops at its rows that count (`m_limit`, `k_limit`; CODA's GEMMs, which
        read it on the device, in place of cuBLAS's), and dx is zero past them."""
        h, a, w, g, rstd = self.h, self.a, self.w, self.g, self.rstd
        (tokens, hidden), vocab = h.shape, w.shape[0]
        need_x, need_w, need_b, need_g = need
        dw_here, db_here = need_w and not by_chunk, need_b and not by_chunk
        dx = (torch.empty_like if self.count is None else torch.zeros_like)(h) if need_x else None
        dw = torch.empty_like(w, dtype=dw_dtype) if dw_here else None
        db = dg = dw_sum = None
        spans = _spans(tokens, self.rows) if need_x or need_g or dw_here or db_here else []
        # cuBLAS runs a K = V that is not a multiple of 16 bytes (GPT-2's 50257) in its slow
        # unaligned kernels: the dx GEMM takes the aligned first `whole` columns; the exponential
        # path adds the few last ones' product in its row scale's map, the general one in float32
        # (beta = 1) onto that product, rounded on its own (a tiny K: its rounding is negligible
        # next to dx's one) in the unaligned kernel, launched first.
        whole = vocab // ROW_PAD * ROW_PAD
        direct = len(spans) == 1 or dw_dtype == _accumulator_dtype(a)
        for i, (r0, r1) in enumerate(spans):
            limit = self._limit(r0, r1)
            outs = grad_block(r0, r1, ["output"] + ["r"] * (self.norm and (need_x or need_g))
                              + ["db"] * db_here, limit)
            g_b, a_b = outs["output"], self.dw_operand()[r0:r1] if dw_here else None
            scale = outs.get("scale")   # the exponential path: G_b = scale ⊙_row g_b
            if scale is not None and dw_here:
                a_b = SCALE_ROWS.map(a_b, m_limit=limit, c=scale)["output"]
            if db_here:
                db = outs["db"] if db is None else db + outs["db"]
            if dw_here:   # dw += G_b.T @ a_b, summed in float32
                if direct and i == 0:   # into dw itself: one block, or dw is float32
                    if g_b.dtype == dw.dtype and limit is None:
                        torch.matmul(g_b.T, a_b, out=dw)   # a plain GEMM: cuBLAS
                    else:
                        PLAIN(g_b.T, a_b, out=dw, k_limit=limit)
                elif i == 0:
                    dw_sum = PLAIN(g_b.T, a_b, out_dtype=_accumulator_dtype(a), k_limit=limit)["output"]
                elif direct or i < len(spans) - 1:
                    into = dw if direct else dw_sum
                    if limit is None:
                        weight_grad(g_b, a_b, into=into)
                    else:
                        ACCUMULATE(g_b.T, a_b, out=into, k_limit=limit)
                else:   # the last block's GEMM adds the float32 sum and rounds once
                    ADD_PARTIAL(g_b.T, a_b, partial=dw_sum, out=dw, k_limit=limit)
            if not (need_x or need_g):
                continue
            if self.norm:
                k = rstd[r0:r1] * rstd[r0:r1] * outs["r"] / hidden
                unscaled = dict(rstd=rstd[r0:r1]) if self.unscaled else {}
                final = dx_norm_program(self.unscaled)(
                    g_b, w, out=None if dx is None else dx[r0:r1], m_limit=limit,
                    outputs=["output"] * need_x + ["dg"] * need_g, g=g, k=k, h=h[r0:r1], **unscaled)
                if need_g:
                    dg = final["dg"] if dg is None else dg + final["dg"]
                continue
            dx_b = dx[r0:r1]   # complete, a plain GEMM into rows b of dx
            if limit is not None:   # rows past the limit stay zero
                PLAIN(g_b, w, out=dx_b, m_limit=limit)
            elif whole < vocab and scale is not None:   # the tail joins the row scale's map
                torch.matmul(g_b[:, :whole], w[:whole], out=dx_b)
                tail = {operand: value for j in range(vocab - whole)
                        for operand, value in ((f"g{j}", g_b[:, whole + j]), (f"w{j}", w[whole + j]))}
                tail_and_scale(vocab - whole).map(dx_b, out=dx_b, c=scale, **tail)
                continue
            elif whole < vocab:   # cuBLAS
                torch.matmul(g_b[:, whole:], w[whole:], out=dx_b)
                dx_b.addmm_(g_b[:, :whole], w[:whole])
            else:
                torch.matmul(g_b, w, out=dx_b)
            if scale is not None:   # measured faster than the row scale in a CODA GEMM's epilogue
                SCALE_ROWS.map(dx_b, out=dx_b, m_limit=limit, c=scale)
        return dx, dw, db, dg


def exp_headroom(reference: torch.Tensor, se: torch.Tensor, limit: torch.Tensor | None
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """(lse, redo) of an exponential-path block: lse = c + log ΣE per row, and the m_limit of
    the block's second forward, redo [1] int32: its rows (`limit` if given) when a row the
    block computed (one below `limit`) has lse - c > EXP_HEADROOM, else 0. An ignored row
    counts too: its E, left to overflow, would turn its zero share of the GEMMs that read E
    into 0 * inf = NaN. One Triton kernel where CODA's programs run Triton
    (ops/cross_entropy_rows.py); these PyTorch operators elsewhere."""
    if default_backend(reference) == "triton":
        from . import cross_entropy_rows
        return cross_entropy_rows.headroom(reference, se, limit, EXP_HEADROOM)
    rows = reference.shape[0] if limit is None else limit
    lse = reference + torch.log(se)
    computed = torch.arange(reference.shape[0], device=reference.device) < rows
    again = ((lse - reference > EXP_HEADROOM) & computed).any()
    return lse, again.to(torch.int32).reshape(1) * rows


def exp_patch(reference: torch.Tensor, lse: torch.Tensor, lse_again: torch.Tensor, redo: torch.Tensor,
              t: torch.Tensor, target: torch.Tensor, alpha: torch.Tensor, e: torch.Tensor
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """(lse, scale) of an exponential-path block after its second forward: lse and c are the
    general forward's lse (`lse_again`) where the block ran again (redo > 0), else lse and the
    reference; E's element at each row's target becomes exp(t - c) - exp(lse - c) in place
    (none for a target outside [0, V)), and scale = α·exp(c - lse), 0 where α = 0 (a row not
    computed: its lse may be anything), NaN where α is (a target outside [0, V)). One Triton
    kernel where CODA's programs run Triton; these PyTorch operators elsewhere."""
    if default_backend(e) == "triton":
        from . import cross_entropy_rows
        return cross_entropy_rows.patch(reference, lse, lse_again, redo, t, target, alpha, e)
    again = redo[0] > 0
    lse = torch.where(again, lse_again, lse)
    c = torch.where(again, lse_again, reference)
    rows, vocab = e.shape
    hit = torch.arange(rows, device=e.device), target.long().clamp(0, vocab - 1)
    onehot = (target >= 0) & (target < vocab)
    patched = torch.exp(t - c) - torch.exp(lse - c)
    e[hit] = torch.where(onehot, patched, e[hit].to(c.dtype)).to(e.dtype)
    return lse, torch.where(alpha != 0, alpha * torch.exp(c - lse), 0.0)   # NaN α stays NaN


def _accumulator_dtype(x: torch.Tensor) -> torch.dtype:
    """Partial sums across blocks: float32, float64 for float64 operands."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32


@follows_autocast("norm_weight")
def linear_cross_entropy(x: torch.Tensor, w: torch.Tensor, target: torch.Tensor,
                         bias: torch.Tensor | None = None, ignore_index: int = -100,
                         reduction: str = "mean", label_smoothing: float = 0.0,
                         softcap: float | None = None, chunk_size: int | None = None,
                         norm_weight: torch.Tensor | None = None, norm_eps: float = 1e-6,
                         low_memory: bool = False, skip_ignored: bool = False,
                         exponential: bool = True) -> torch.Tensor:
    """cross_entropy(x @ w.T + bias, target) without the logits in memory.

    x [..., H]; w [V, H]; target [...] integer classes; bias [V]. `softcap` c replaces each logit
    by c·tanh(logit / c); `norm_weight` g [H] applies an RMSNorm with weight g and `norm_eps` to
    x first (folded into the GEMMs). The gradients are formed from blocks of rows of the logits'
    gradient, materialized one at a time (see the module's docstring): for a scalar loss that
    needs them, in the forward; `chunk_size` sets a block to `chunk_size`·T logits (default:
    about 2**29). `low_memory=True` keeps the peak
    memory at or below Liger Kernel's (blocks no larger than its chunks and no float32 [V, H]
    accumulator for dw) for one more GEMM of T·H·V; `chunk_size` is then also the number of
    vocabulary columns per chunk of its dw pass. `ignore_index`,
    `reduction` and `label_smoothing` as in torch.nn.functional.cross_entropy. Returns a scalar
    ("mean", "sum") or a loss per row of x's leading shape ("none"), in float32 (float64 for
    float64 x): the precision of the statistics, as autocast computes cross-entropy; a bf16 loss
    would carry a 2**-9 rounding.

    `skip_ignored=True` spends no GEMM work on the rows whose target is `ignore_index` when the
    forward forms the gradients (a scalar loss that needs them, not `low_memory`): the rows
    that count are gathered first (a sort of the targets, a gather of x's rows and a scatter
    of dx's), and every GEMM and map stops at their number, read on the device (no
    synchronization: it runs inside a CUDA graph). A masked-language-model batch (15% of its
    rows count) then costs about a sixth of the GEMM work; when every row counts it only adds
    the gather and scatter.

    `exponential=True` (the default) lets a head without bias, cap, norm or smoothing whose
    forward forms the gradients take the exponential path (module docstring): no gradient map,
    GPT-2's head (16384 × 768 × 50257, bf16, H200) about 0.9 ms faster forward + backward.
    Its GPT-2 training curves follow those of eager PyTorch with a float32 LM head (a more exact
    head than eager bf16's) where the general path's follow eager bf16's (docs/ops.md, "The
    exponential path"); `exponential=False` forms the gradients as eager bf16 rounds them.
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
    if not checks.integer(ignore_index):
        raise LaunchError(f"ignore_index must be an int, got {ignore_index!r}")
    if not checks.real(label_smoothing) or not 0.0 <= label_smoothing <= 1.0:
        raise LaunchError(f"label_smoothing must be a number in [0, 1], got {label_smoothing!r}")
    if softcap is not None and (not checks.real(softcap) or not 0 < softcap < math.inf):
        raise LaunchError(f"softcap must be None or a positive finite number, got {softcap!r}")
    if chunk_size is not None and (not checks.integer(chunk_size) or chunk_size < 1):
        raise LaunchError(f"chunk_size must be None or a positive int, got {chunk_size!r}")
    if not checks.real(norm_eps) or not norm_eps >= 0:
        raise LaunchError(f"norm_eps must be a non-negative number, got {norm_eps!r}")
    for name, flag in (("low_memory", low_memory), ("skip_ignored", skip_ignored),
                       ("exponential", exponential)):
        if not isinstance(flag, bool):
            raise LaunchError(f"{name} must be a bool, got {flag!r}")
    if target.numel() == 0:   # no rows: torch's loss (NaN for a mean, 0 for a sum), zero gradients
        stat = torch.float64 if x.dtype == torch.float64 else torch.float32   # the loss's dtype
        h = (x if norm_weight is None else x * norm_weight).to(stat)
        logits = torch.nn.functional.linear(h, w.to(stat), None if bias is None else bias.to(stat)
                                            ).reshape(0, vocab)
        return torch.nn.functional.cross_entropy(logits, target.reshape(0), ignore_index=ignore_index,
                                                 reduction=reduction, label_smoothing=label_smoothing
                                                 ).reshape(target.shape if reduction == "none" else ())
    # A scalar loss's gradients are the forward's, times one number: form them in the forward
    # (its GEMMs' blocks then serve the loss too) unless no gradient can follow.
    grads_in_forward = (reduction != "none" and not low_memory and torch.is_grad_enabled()
                        and any(t is not None and t.requires_grad for t in (x, w, bias, norm_weight)))
    args = (x, w, target, bias, norm_weight, int(ignore_index), reduction, float(label_smoothing),
            None if softcap is None else float(softcap), None if chunk_size is None else int(chunk_size),
            low_memory, float(norm_eps),
            grads_in_forward, skip_ignored, exponential)
    from ..integrations import compile as custom  # here: that module imports this one
    if custom.routed():   # inside torch.compile: the custom ops coda::linear_cross_entropy*
        return custom.linear_cross_entropy_op(*args)
    if target.device.type == "cpu":   # no device to synchronize with (a GPU's poisons: docstring)
        _check_targets(target, w.shape[0], ignore_index)
    return LinearCrossEntropyFunction.apply(*args)


def outside_vocabulary(target: torch.Tensor, valid: torch.Tensor, vocab: int) -> torch.Tensor:
    """The rows whose target is outside [0, V) and not ignored (`valid`: not ignore_index)."""
    return valid & (target.clamp(0, vocab - 1) != target)


def _check_targets(target: torch.Tensor, vocab: int, ignore_index: int) -> None:
    outside = outside_vocabulary(target, target != ignore_index, vocab)
    if outside.any():
        raise LaunchError(f"target holds {int(outside.sum())} class(es) outside [0, {vocab}) that are "
                          f"not ignore_index ({ignore_index}), the first {int(target[outside][0])}")


def _check_tensor(x: object, name: str, shape: str) -> None:
    if not isinstance(x, torch.Tensor):
        raise LaunchError(f"{name} must be a tensor {shape}, got {checks.describe(x)}")
