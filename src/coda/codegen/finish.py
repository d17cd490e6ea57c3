"""Finishing cross-tile reductions: merging every tile's partial into the result.

Every tile writes its partial of each reduction output (codegen/epilogue.py): row reductions into a
[column slices, M] buffer, column reductions into a [row blocks, N] buffer (N/2 for the half-width
domain of `unpack`). A merge combines one block of the result along the partials' first axis in
index order (deterministic whoever runs it): sums and maxima directly, a log-sum-exp from each
partial's maximum m_p and its sum s_p of e^(x - m_p), merged into a running maximum and sum. Each
reduction output gets one merge function, `merge_<name>(pid, size, parts, partials..., result, P,
BLOCK)`, called from one of two places:

- after a GEMM, one small `finish` kernel per launch: program i merges row block i of the row
  reductions and column block i of the column ones, so a launch with several reductions (a norm's
  Σx and Σx², a layer norm's four gradient sums) is one kernel, not one torch reduction each (a
  GPT-2 training step had 223 of those, 6.3 µs each on the H200, measured);
- in a map, the tile that completes a row block (or column block) merges it: each tile counts
  itself in an int32 counter per row block and one per column block after writing its partials,
  and the last of a block merges the block and sets its counter back to 0 for the next launch
  (`map_tail`). A map then needs no second kernel (GPT-2's step ran 108 finishing kernels after
  maps, 2.8 µs each and a kernel boundary more; twenty-third session).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import triton

from ..passes.widths import HALF

if TYPE_CHECKING:
    from ..runtime.program import Program
    from .epilogue import Signature

#: Partials x columns each program loads per step.
TILE = 2048


def merge_tile(parts: int) -> tuple[int, int]:
    """(partials, columns) per step of the finishing kernel's merge: up to 128 partials at a
    time, so that a row block of the cross-entropy (1571 partials of 2560 rows at GPT-2's
    vocabulary) takes 13 steps over 160 programs, not 1571 steps in each of 10 (one step of 256
    columns: measured on the H200, 0.68 ms a 1280-row block); a launch of few partials (a
    768-wide layer's 24) takes wide column blocks instead."""
    block_p = merge_step(parts, 16)
    return block_p, max(16, TILE // block_p)


def merge_step(parts: int, block: int) -> int:
    """Partials a merge of `block` values loads per step: up to 128, and TILE values in all."""
    return min(128, triton.next_power_of_2(max(parts, 1)), max(1, TILE // block))


def written(program: Program, sig: Signature) -> list:
    """The reduction outputs a launch of `sig` writes, in the program's order."""
    return [o for o in program.ir.outputs if o.reduction is not None and o.name in sig.outputs]


def buffers(out) -> list[str]:
    """One reduction's partial buffers (two for a log-sum-exp) and its result, as parameters."""
    partials = ([f"red_{out.name}_max", f"red_{out.name}_sum"] if out.reduction == "row_logsumexp"
                else [f"red_{out.name}_ptr"])
    return [*partials, f"fin_{out.name}_ptr"]


def result_params(program: Program, sig: Signature) -> list[str]:
    """The results of a map's reductions, the map kernel's parameters after its epilogue's."""
    return [f"fin_{o.name}_ptr" for o in written(program, sig)]


def _size(program: Program, out) -> str:
    """The length of a reduction's result, in the kernel's M and N."""
    if out.axis == "row":
        return "M"
    return "(N // 2)" if program.widths.outputs[out.name] == HALF else "N"


def generate_merges(program: Program, sig: Signature, finish_kernel: bool) -> str:
    """The merge function of every reduction the launch writes and, with `finish_kernel` (after
    a GEMM), the `finish(M, N, row_parts, col_parts, ..., ROW_P, ROW_BLOCK, COL_P, COL_BLOCK)`
    kernel calling them: ROW_P partials of ROW_BLOCK rows a step for the row reductions, COL_P of
    COL_BLOCK columns for the column ones (`merge_tile`); "" when the launch writes no reduction."""
    outs = written(program, sig)
    source = "".join(_merge_function(out) for out in outs)
    if not outs or not finish_kernel:
        return source
    params = ", ".join(["M", "N", "row_parts", "col_parts", *(p for o in outs for p in buffers(o)),
                        *(f"{c}: tl.constexpr" for c in ("ROW_P", "ROW_BLOCK", "COL_P", "COL_BLOCK"))])
    calls = []
    for out in outs:
        parts, p, block = (("row_parts", "ROW_P", "ROW_BLOCK") if out.axis == "row"
                           else ("col_parts", "COL_P", "COL_BLOCK"))
        calls.append(f"    merge_{out.name}(pid, {_size(program, out)}, {parts}, "
                     f"{', '.join(buffers(out))}, {p}, {block})")
    return (source + f"\n@triton.jit\ndef finish({params}):\n    pid = tl.program_id(0)\n"
            + "\n".join(calls) + "\n")


def map_tail(program: Program, sig: Signature) -> str:
    """The lines ending the map kernel (in its `pid_m`, `pid_n`, `BLOCK_M`, `BLOCK_N`, with
    `row_count`, `col_count` and ROW_P, COL_P from the Plan): each tile counts itself in its row
    and column block, and the last tile of a block merges that block."""
    outs = written(program, sig)
    if not outs:
        return ""
    # every thread's partials are written before the tile counts itself (the atomic releases
    # them at GPU scope; the last tile's atomic acquires all the others')
    lines = ["tl.debug_barrier()"]
    for axis, pid, count, parts, p in (("row", "pid_m", "row_count", "tl.cdiv(N, BLOCK_N)", "ROW_P"),
                                       ("col", "pid_n", "col_count", "tl.cdiv(M, BLOCK_M)", "COL_P")):
        mine = [o for o in outs if o.axis == axis]
        if not mine:
            continue
        lines += [f"if tl.atomic_add({count} + {pid}, 1) == {parts} - 1:",
                  f"    tl.store({count} + {pid}, 0)"]
        for out in mine:
            block = "BLOCK_M" if axis == "row" else (
                "BLOCK_N // 2" if program.widths.outputs[out.name] == HALF else "BLOCK_N")
            lines.append(f"    merge_{out.name}({pid}, {_size(program, out)}, {parts}, "
                         f"{', '.join(buffers(out))}, {p}, {block})")
    return "\n".join("    " + line for line in lines) + "\n"


def _merge_function(out) -> str:
    """`merge_<name>(pid, size, parts, partials..., result, P, BLOCK)`: block `pid` of the result
    (BLOCK values) from its `parts` partials, P at a time. Partials are loaded past the L1 cache
    (`.cg`): in a map another SM wrote them during this kernel."""
    name = out.name
    is_lse, is_sum = out.reduction == "row_logsumexp", out.reduction.endswith("_sum")
    fill = "0.0" if is_sum else "float('-inf')"
    lines = ["if pid * BLOCK < size:",
             "    at = pid * BLOCK + tl.arange(0, BLOCK)",
             f"    top = tl.full([BLOCK], {fill}, tl.float32)"]
    if is_lse:
        lines.append("    total = tl.zeros([BLOCK], tl.float32)")
    lines += ["    for p0 in range(0, parts, P):",
              "        p = p0 + tl.arange(0, P)",
              "        inside = (p < parts)[:, None] & (at < size)[None, :]",
              "        offsets = p[:, None] * size + at[None, :]"]
    if is_lse:
        lines += [
            f"        m = tl.load(red_{name}_max + offsets, mask=inside, other=float('-inf'), "
            "cache_modifier='.cg')",
            f"        s = tl.load(red_{name}_sum + offsets, mask=inside, other=0.0, cache_modifier='.cg')",
            "        new = tl.maximum(top, tl.max(m, axis=0), propagate_nan=tl.PropagateNan.ALL)",
            # a value whose partials are all -inf so far shifts by 0: exp(-inf - -inf) is NaN
            "        shift = tl.where(new == float('-inf'), 0.0, new)",
            "        total = total * tl.exp(top - shift) + tl.sum(s * tl.exp(m - shift[None, :]), axis=0)",
            "        top = new"]
        value = "tl.where(total == 0.0, float('-inf'), top + tl.log(total))"
    else:
        lines.append(f"        part = tl.load(red_{name}_ptr + offsets, mask=inside, other={fill}, "
                     "cache_modifier='.cg')")
        lines.append("        top += tl.sum(part, axis=0)" if is_sum else
                     "        top = tl.maximum(top, tl.max(part, axis=0), propagate_nan=tl.PropagateNan.ALL)")
        value = "top"
    lines.append(f"    tl.store(fin_{name}_ptr + at, ({value}).to(fin_{name}_ptr.dtype.element_ty), "
                 "mask=at < size)")
    params = ", ".join(["pid", "size", "parts", *buffers(out), "P: tl.constexpr", "BLOCK: tl.constexpr"])
    body = "\n".join("    " + line for line in lines)
    return f"\n@triton.jit\ndef merge_{name}({params}):\n{body}\n"
