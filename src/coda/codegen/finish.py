"""Finishing cross-tile reductions: one generated kernel per launch combines the partials.

Every tile writes its partial of each reduction output (codegen/epilogue.py): row reductions into a
[column slices, M] buffer, column reductions into a [row blocks, N] buffer (N/2 for the half-width
domain of `unpack`). The finishing kernel merges every buffer of the launch along its first axis in
index order (deterministic, no atomics): sums and maxima directly, a log-sum-exp from each
partial's maximum m_p and its sum s_p of e^(x - m_p), merged into a running maximum and sum.
Program i takes row block i of the row reductions and column block i of the column ones, so a
launch with several reductions (a norm's Σx and Σx², a layer norm's four gradient sums) is one
small kernel, not one torch reduction each: a GPT-2 training step had 223 of those, 6.3 µs each
on the H200 (measured).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import TYPE_CHECKING

import triton

from ..passes.widths import HALF
from ..runtime.binding import A_COL_SUMS

if TYPE_CHECKING:
    from ..runtime.program import Program
    from .epilogue import Signature

#: Partials x columns each program loads per step.
TILE = 2048


def merge_tile(parts: int) -> tuple[int, int]:
    """(partials, columns) per step of the merge: up to 128 partials at a time, so that a row
    block of the cross-entropy (1571 partials of 2560 rows at GPT-2's vocabulary) takes 13
    steps over 160 programs, not 1571 steps in each of 10 (one step of 256 columns: measured
    on the H200, 0.68 ms a 1280-row block); a launch of few partials (a 768-wide layer's 24)
    takes wide column blocks instead."""
    block_p = min(128, triton.next_power_of_2(max(parts, 1)))
    return block_p, max(16, TILE // block_p)


def _written(program: Program, sig: Signature) -> list:
    """The reduction outputs a launch of `sig` writes and finishes (not those it leaves as
    partials, `sig.unfinished`), in the program's order."""
    return [o for o in program.ir.outputs if o.reduction is not None and o.name in sig.outputs
            and o.name not in sig.unfinished]


#: `a_col_sums=True`'s sums, merged as a column sum of K columns: [row blocks, K] partials
A_SUMS = SimpleNamespace(name=A_COL_SUMS, reduction="col_sum")


def _finishes_a_sums(sig: Signature) -> bool:
    """Whether the launch sums A's columns and finishes them (not left as Partials)."""
    return A_COL_SUMS in sig.outputs and A_COL_SUMS not in sig.unfinished


def _params(program: Program, sig: Signature) -> list[str]:
    """The finishing kernel's buffer parameters, in the order the launcher passes them: each
    reduction's partials (two buffers for a log-sum-exp) and then its result; A's column sums
    last."""
    params = []
    for out in _written(program, sig) + [A_SUMS] * _finishes_a_sums(sig):
        partials = ([f"red_{out.name}_max", f"red_{out.name}_sum"] if out.reduction == "row_logsumexp"
                    else [f"red_{out.name}_ptr"])
        params += [*partials, f"fin_{out.name}_ptr"]
    return params


def generate_finish(program: Program, sig: Signature) -> str:
    """The source of `finish(M, N, K, row_parts, col_parts, M_LIMIT, ..., ROW_P, ROW_BLOCK, COL_P,
    COL_BLOCK, LIMIT_M, TILE_M)`:
    ROW_P partials of ROW_BLOCK rows a step for the row reductions, COL_P of COL_BLOCK columns for
    the column ones and A's column sums (`merge_tile`), "" when the launch writes no reduction."""
    by_axis = {axis: [o for o in _written(program, sig) if o.axis == axis] for axis in ("row", "col")}
    a_sums = _finishes_a_sums(sig)
    if not any(by_axis.values()) and not a_sums:
        return ""
    lines = [line for axis, outs in by_axis.items() if outs for line in _merge(program, axis, outs)]
    if a_sums:
        lines += _merge(program, "col", [A_SUMS], size="K")
    params = ", ".join(["M", "N", "K", "row_parts", "col_parts", "M_LIMIT", *_params(program, sig),
                        *(f"{c}: tl.constexpr" for c in ("ROW_P", "ROW_BLOCK", "COL_P", "COL_BLOCK",
                                                         "LIMIT_M", "TILE_M"))])
    # under a limit on M (`m_limit=`) the kernel ran as if M were the limit: its rows and its
    # tiles of TILE_M rows past it have no partials
    limit = ["if LIMIT_M:", "    M = cm.limited(M, M_LIMIT)",
             "    col_parts = tl.cdiv(M, TILE_M)"]
    body = "\n".join("    " + line for line in limit + lines)
    return f"\n@triton.jit\ndef finish({params}):\n    pid = tl.program_id(0)\n{body}\n"


def _merge(program: Program, axis: str, outs: list, size: str | None = None) -> list[str]:
    """Lines merging the partials of every `axis` reduction in one loop over the partials, each
    `size` long (default: M for rows, N or N/2 for columns)."""
    p, block, parts = ("ROW_P", "ROW_BLOCK", "row_parts") if axis == "row" else ("COL_P", "COL_BLOCK",
                                                                                    "col_parts")
    sizes = {o.name: size or ("M" if axis == "row" else
             ("(N // 2)" if program.widths.outputs[o.name] == HALF else "N")) for o in outs}
    lines = [f"if pid * {block} < {size or ('M' if axis == 'row' else 'N')}:",
             f"    {axis}s = pid * {block} + tl.arange(0, {block})"]
    fills = {o.name: "0.0" if o.reduction.endswith("_sum") else "float('-inf')" for o in outs}
    for o in outs:
        lines.append(f"    {o.name}_top = tl.full([{block}], {fills[o.name]}, tl.float32)")
        if o.reduction == "row_logsumexp":
            lines.append(f"    {o.name}_total = tl.zeros([{block}], tl.float32)")
    lines += [f"    for p0 in range(0, {parts}, {p}):",
              f"        p = p0 + tl.arange(0, {p})"]
    for o in outs:
        name, size = o.name, sizes[o.name]
        lines += [f"        {name}_in = (p < {parts})[:, None] & ({axis}s < {size})[None, :]",
                  f"        {name}_at = p[:, None] * {size} + {axis}s[None, :]"]
        if o.reduction == "row_logsumexp":
            lines += [
                f"        {name}_m = tl.load(red_{name}_max + {name}_at, mask={name}_in, "
                f"other=float('-inf'))",
                f"        {name}_s = tl.load(red_{name}_sum + {name}_at, mask={name}_in, other=0.0)",
                f"        {name}_new = tl.maximum({name}_top, tl.max({name}_m, axis=0), "
                f"propagate_nan=tl.PropagateNan.ALL)",
                # an infinite running maximum shifts by 0: exp(inf - inf) is NaN
                f"        {name}_shift = tl.where(tl.abs({name}_new) == float('inf'), 0.0, {name}_new)",
                f"        {name}_total = ({name}_total * tl.exp({name}_top - {name}_shift)"
                f" + tl.sum({name}_s * tl.exp({name}_m - {name}_shift[None, :]), axis=0))",
                f"        {name}_top = {name}_new"]
            continue
        lines.append(f"        {name}_part = tl.load(red_{name}_ptr + {name}_at, mask={name}_in, "
                     f"other={fills[name]})")
        if o.reduction.endswith("_sum"):
            lines.append(f"        {name}_top += tl.sum({name}_part, axis=0)")
        else:
            lines.append(f"        {name}_top = tl.maximum({name}_top, cm.max_keeping_nan({name}_part, 0), "
                         f"propagate_nan=tl.PropagateNan.ALL)")
    for o in outs:
        name = o.name
        # log of 1, not 0, where the sum is empty (rows past M): no divide-by-zero in numpy's
        # log under the interpreter; the -inf such a row stores is the where's
        value = (f"tl.where({name}_total == 0.0, float('-inf'), "
                 f"{name}_top + tl.log(tl.where({name}_total == 0.0, 1.0, {name}_total)))"
                 if o.reduction == "row_logsumexp" else f"{name}_top")
        lines.append(f"    tl.store(fin_{name}_ptr + {axis}s, ({value}).to(fin_{name}_ptr.dtype.element_ty), "
                     f"mask={axis}s < {sizes[name]})")
    return lines
