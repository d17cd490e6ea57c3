"""IR -> the source of one `@triton.jit def epilogue(...)`, called by every mainloop template.

The epilogue receives the fp32 accumulator of one [BLOCK_M, BLOCK_N] output tile, the tile's
row-block index `pid_m` and column-block index `tile_n` (in units of BLOCK_N), and the operand and
output pointers. It is straight-line code: one SSA variable per IR node, loads where operands
are read, then one masked store per tile output and one partial per reduction output.

Reductions are deterministic: each tile writes its partial (row partials into a
[column tiles, M] buffer, column partials into a [row tiles, N] buffer) and the host finishes
them with a fixed-order reduction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..ir import Node
from ..passes.widths import HALF
from ..primitives import PRIMITIVES

if TYPE_CHECKING:
    from ..runtime.program import Program

#: Per column domain: the column-index variable, its mask, the tile width and the domain size.
_DOMAIN = {
    "full": ("cols", "mask_n", "BLOCK_N", "N"),
    HALF: ("hcols", "mask_h", "(BLOCK_N // 2)", "(N // 2)"),
}


@dataclass(frozen=True)
class Signature:
    """What the generated source depends on besides the program: each operand's kind, and
    whether a scalar operand arrives as a number or as a 0-d tensor (loaded through a pointer)."""

    kinds: tuple[tuple[str, str], ...]
    scalar_tensors: frozenset[str]
    outputs: tuple[str, ...]            # the outputs this launch writes
    tma: frozenset[str] = frozenset()   # tile operands (`op_x`) and outputs (`out_y`) read or
                                        # written through TMA descriptors (Hopper mainloop)


def kernel_params(program: Program, sig: Signature) -> list[str]:
    """The epilogue's operand and output parameters, in the order the launcher passes them."""
    params = []
    for name, kind in sig.kinds:
        base = f"op_{name}"
        if kind == "scalar":
            params.append(f"{base}_ptr" if name in sig.scalar_tensors else base)
        else:
            params += {"tile": [f"{base}_ptr", f"{base}_s0", f"{base}_s1"],
                       "row": [f"{base}_ptr", f"{base}_s0"],
                       "col": [f"{base}_ptr", f"{base}_s0"],
                       "head": [f"{base}_ptr", f"{base}_s0", f"{base}_s1", f"{base}_h"]}[kind]
    for out in program.ir.outputs:
        if out.name not in sig.outputs:
            continue
        if out.reduction is None:
            params += [f"out_{out.name}_ptr", f"out_{out.name}_s0", f"out_{out.name}_s1"]
        elif out.reduction == "row_logsumexp":
            params += [f"red_{out.name}_max", f"red_{out.name}_sum"]
        else:
            params.append(f"red_{out.name}_ptr")
    return params


def epilogue_args(program: Program, sig: Signature) -> list[str]:
    """What the mainloop passes to the epilogue: the kernel parameters, with a descriptor in
    place of pointer and strides for every tile in `sig.tma`."""
    args = []
    for param in kernel_params(program, sig):
        base, _, field = param.rpartition("_")
        if base in sig.tma:
            if field == "ptr":
                args.append(f"{base}_desc")
        else:
            args.append(param)
    return args


def descriptor_prologue(program: Program, sig: Signature) -> str:
    """Kernel-prologue lines that make the TMA descriptors of `sig.tma` (one per program)."""
    lines = []
    for base in sorted(sig.tma):
        half = program.widths.operands.get(base[3:]) == {HALF} if base.startswith("op_") else (
            program.widths.outputs[base[4:]] == HALF)
        cols, block = ("N // 2", "EPILOGUE_N // 2") if half else ("N", "EPILOGUE_N")
        lines.append(f"    {base}_desc = tl.make_tensor_descriptor({base}_ptr, shape=[M, {cols}], "
                     f"strides=[{base}_s0, 1], block_shape=[BLOCK_M, {block}])")
    return "\n".join(lines)


def generate_epilogue(program: Program, sig: Signature) -> str:
    """The source of `epilogue(acc, pid_m, tile_n, M, N, seed, ..., BLOCK_M, BLOCK_N)`."""
    return _Emitter(program, sig).run()


class _Emitter:
    def __init__(self, program: Program, sig: Signature):
        self.program = program
        self.kinds = dict(sig.kinds)
        self.sig = sig
        self.domains = program.widths.nodes
        self.lines: list[str] = []
        self.names: dict[Node, str] = {}
        self.unpacked: dict[Node, tuple[str, str]] = {}

    def emit(self, line: str) -> None:
        self.lines.append("    " + line)

    def tile_shape(self, width: str) -> str:
        return f"(BLOCK_M, {_DOMAIN[width][2]})"

    def mask2d(self, width: str) -> str:
        return f"mask_m[:, None] & {_DOMAIN[width][1]}[None, :]"

    def broadcast(self, node: Node) -> str:
        return f"tl.broadcast_to({self.names[node]}, {self.tile_shape(self.domains[node])})"

    def run(self) -> str:
        params = ", ".join(["acc", "pid_m", "tile_n", "M", "N", "seed",
                            *epilogue_args(self.program, self.sig), "BLOCK_M: tl.constexpr",
                            "BLOCK_N: tl.constexpr"])
        self.emit("rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)")
        self.emit("cols = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)")
        self.emit("mask_m = rows < M")
        self.emit("mask_n = cols < N")
        if any(o.axis == "row" and o.name in self.sig.outputs for o in self.program.ir.outputs):
            # a column slice wholly past N (Hopper's split epilogue, ragged N) has no partial row
            self.emit("mask_r = mask_m & (tile_n * BLOCK_N < N)")
        if any(w == HALF for w in self.domains.values()):
            self.emit("hcols = tile_n * (BLOCK_N // 2) + tl.arange(0, BLOCK_N // 2)")
            self.emit("mask_h = hcols < N // 2")
        for index, node in enumerate(self.program.ir.nodes()):
            if node.op == "operand" and self.kinds[node.arg] == "head":
                self.names[node] = f"op_{node.arg}"  # read by rope, which knows its pair indices
                continue
            self.names[node] = f"v{index}"
            self.emit(f"v{index} = {self.value(node)}")
        for out in self.program.ir.outputs:
            if out.name in self.sig.outputs:
                self.store(out)
        body = "\n".join(self.lines)
        return f"@triton.jit\ndef epilogue({params}):\n{body}\n"

    # values -----------------------------------------------------------------------------------
    def value(self, node: Node) -> str:
        op, args = node.op, [self.names[a] for a in node.args]
        width = self.domains[node]
        if op == "input":
            return "acc"
        if op == "const":
            return f"tl.full((1, 1), {float(node.arg)!r}, tl.float32)"
        if op == "operand":
            return self.load_operand(node.arg, width)
        if op == "prior":
            return self.load_tile("out_output", width)
        if op == "unpack":
            return self.unpack(node)
        if op == "dropout":
            block = _DOMAIN[width][2]
            return PRIMITIVES["dropout"].triton.format(
                self.broadcast(node.args[0]), args[1], first_col=f"tile_n * {block}", block=block)
        if op == "rope":
            return self.rope(node)
        if op == "col_index":
            return PRIMITIVES[op].triton.format(cols=_DOMAIN[width][0])
        return PRIMITIVES[op].triton.format(*args)

    def load_operand(self, name: str, width: str) -> str:
        kind, base = self.kinds[name], f"op_{name}"
        cols, mask_c, _, _ = _DOMAIN[width]
        if kind == "scalar":
            value = f"tl.load({base}_ptr)" if name in self.sig.scalar_tensors else base
            return f"tl.zeros((1, 1), tl.float32) + {value}"
        if kind == "row":
            return f"tl.load({base}_ptr + rows * {base}_s0, mask=mask_m, other=0.0).to(tl.float32)[:, None]"
        if kind == "col":
            return (f"tl.load({base}_ptr + {cols} * {base}_s0, mask={mask_c}, "
                    f"other=0.0).to(tl.float32)[None, :]")
        return self.load_tile(base, width)

    def load_tile(self, base: str, width: str) -> str:
        cols, _, block, _ = _DOMAIN[width]
        if base in self.sig.tma:
            return f"{base}_desc.load([pid_m * BLOCK_M, tile_n * {block}]).to(tl.float32)"
        ptr = f"{base}_ptr + rows[:, None] * {base}_s0 + {cols}[None, :] * {base}_s1"
        return f"tl.load({ptr}, mask={self.mask2d(width)}, other=0.0).to(tl.float32)"

    def unpack(self, node: Node) -> str:
        source = node.args[0]
        if source not in self.unpacked:
            pair = (f"{self.names[source]}_first", f"{self.names[source]}_second")
            self.emit(f"{pair[0]}, {pair[1]} = tl.split(tl.reshape({self.broadcast(source)}, "
                      f"(BLOCK_M, BLOCK_N // 2, 2)))")
            self.unpacked[source] = pair
        return self.unpacked[source][node.arg]

    def rope(self, node: Node) -> str:
        x, cos, sin = node.args
        v = self.names[node]
        _, _, block, _ = _DOMAIN[self.domains[node]]
        self.emit(f"{v}_x0, {v}_x1 = tl.split(tl.reshape({self.broadcast(x)}, (BLOCK_M, {block} // 2, 2)))")
        self.emit(f"{v}_pair = tile_n * ({block} // 2) + tl.arange(0, {block} // 2)")
        for table, short in ((cos, "cos"), (sin, "sin")):
            base = f"op_{table.arg}"
            ptr = f"{base}_ptr + rows[:, None] * {base}_s0 + ({v}_pair % {base}_h)[None, :] * {base}_s1"
            self.emit(f"{v}_{short} = tl.load({ptr}, mask=mask_m[:, None], other=0.0).to(tl.float32)")
        rotated = (f"tl.join({v}_x0 * {v}_cos - {v}_x1 * {v}_sin, "
                   f"{v}_x1 * {v}_cos + {v}_x0 * {v}_sin)")
        return f"tl.reshape({rotated}, (BLOCK_M, {block}))"

    # outputs ----------------------------------------------------------------------------------
    def store(self, out) -> None:
        width = self.program.widths.outputs[out.name]
        cols, mask_c, _, size = _DOMAIN[width]
        value = f"tl.broadcast_to({self.names[out.value]}, {self.tile_shape(width)})"
        if out.reduction is None:
            base = f"out_{out.name}"
            if base in self.sig.tma:
                block = _DOMAIN[width][2]
                self.emit(f"{base}_desc.store([pid_m * BLOCK_M, tile_n * {block}], "
                          f"{value}.to({base}_desc.dtype))")
                return
            ptr = f"{base}_ptr + rows[:, None] * {base}_s0 + {cols}[None, :] * {base}_s1"
            self.emit(f"tl.store({ptr}, {value}.to({base}_ptr.dtype.element_ty), "
                      f"mask={self.mask2d(width)})")
            return
        is_max = out.reduction in ("row_max", "col_max", "row_logsumexp")
        fill = "float('-inf')" if is_max else "0.0"
        part = f"{out.name}_tile"
        self.emit(f"{part} = tl.where({self.mask2d(width)}, {value}, {fill})")
        if out.axis == "col":
            combine = "tl.max" if is_max else "tl.sum"
            self.emit(f"tl.store(red_{out.name}_ptr + pid_m * {size} + {cols}, "
                      f"{combine}({part}, axis=0), mask={mask_c})")
        elif out.reduction == "row_logsumexp":
            self.emit(f"{part}_max = tl.max({part}, axis=1)")
            # a row with no finite value here (past M, or -inf logits) shifts by 0, not -inf:
            # exp(-inf - -inf) would be NaN
            self.emit(f"{part}_shift = tl.where({part}_max == float('-inf'), 0.0, {part}_max)")
            self.emit(f"tl.store(red_{out.name}_max + tile_n * M + rows, {part}_max, mask=mask_r)")
            self.emit(f"tl.store(red_{out.name}_sum + tile_n * M + rows, "
                      f"tl.sum(tl.exp({part} - {part}_shift[:, None]), axis=1), mask=mask_r)")
        else:
            combine = "tl.max" if is_max else "tl.sum"
            self.emit(f"tl.store(red_{out.name}_ptr + tile_n * M + rows, "
                      f"{combine}({part}, axis=1), mask=mask_r)")
