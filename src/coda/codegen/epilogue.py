"""IR -> the source of one `@triton.jit def epilogue(...)`, called by every mainloop template.

The epilogue receives the fp32 accumulator of one [BLOCK_M, BLOCK_N] output tile, the tile's
row-block index `pid_m` and column-block index `tile_n` (in units of BLOCK_N), and the operand and
output pointers. It is straight-line code: one SSA variable per IR node, loads where operands
are read, then one partial per reduction output and one masked store per tile output.

Reductions are deterministic: each tile writes its partial (row partials into a
[column tiles, M] buffer, column partials into a [row tiles, N] buffer) and the host finishes
them with a fixed-order reduction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..ir import Node
from ..passes.edges import zero_past_edge
from ..passes.widths import DOUBLE, FULL, HALF, UNPACKED
from ..primitives import PRIMITIVES
from .mainloops import OPERAND_PARTITION

if TYPE_CHECKING:
    from ..runtime.program import Program


def float_literal(value: float) -> str:
    """`value` as Python source a Triton kernel can read: inf and nan by `float(...)`, since
    `repr` gives bare names."""
    return repr(value) if math.isfinite(value) else f"float('{value}')"


@dataclass(frozen=True)
class _Domain:
    """The names a column domain's code uses: row and column indices and their masks, the tile
    width and domain size, and (Gluon) the tensor whose layout the domain's values take."""

    rows: str
    mask_rows: str
    cols: str
    mask_cols: str
    block: str
    size: str
    like: str


_DOMAIN = {
    "full": _Domain("rows", "mask_m", "cols", "mask_n", "BLOCK_N", "N", "acc"),
    HALF: _Domain("hrows", "mask_hm", "hcols", "mask_h", "(BLOCK_N // 2)", "(N // 2)", "half_like"),
    DOUBLE: _Domain("drows", "mask_dm", "dcols", "mask_d", "(BLOCK_N * 2)", "(N * 2)", "double_like"),
}

#: Where each domain's columns end in a tile (the bound of its column mask).
_COL_END = {"full": "col_end", HALF: "col_end // 2", DOUBLE: "col_end * 2"}

#: Gluon: a layout in which a thread holds whole dropout blocks (rows r and r + 8, columns 2j and
#: 2j + 1: two columns a thread, eight rows a warp) for four warps.
_DRAW_LAYOUT = "gl.BlockedLayout([1, 2], [8, 4], [1, 4], [1, 0])"


@dataclass(frozen=True)
class Signature:
    """What the generated source depends on besides the program: each operand's kind, and
    whether a scalar operand arrives as a number or as a 0-d tensor (loaded through a pointer)."""

    kinds: tuple[tuple[str, str], ...]
    scalar_tensors: frozenset[str]
    outputs: tuple[str, ...]            # the outputs this launch writes
    tma: frozenset[str] = frozenset()   # tile operands (`op_x`) and outputs (`out_y`) read or
                                        # written through TMA descriptors (Hopper mainloop)
    reuse: tuple[tuple[str, tuple[str, ...]], ...] = ()  # ping-pong: (`out_y`, (`op_x`, ...)):
                                             # output y staged in the buffer operand x was staged
                                             # in (same dtype and width), which the epilogue has
                                             # read by then; a packed y's halves in two operands
    shared_tiles: bool = False          # ping-pong: both warpgroups' tile operands in one set
                                        # of buffers (pingpong_parts)
    wide: frozenset[str] = frozenset()  # ping-pong: outputs (`out_y`) stored from registers in
                                        # 16-byte pieces instead of through TMA
    partials: frozenset[str] = frozenset()    # vector operands given as Partials (summed on load)
    unfinished: frozenset[str] = frozenset()  # sums left as partials (no finishing kernel)


def kernel_params(program: Program, sig: Signature) -> list[str]:
    """The epilogue's operand and output parameters, in the order the launcher passes them."""
    params = []
    for name, kind in sig.kinds:
        base = f"op_{name}"
        if kind == "scalar":
            params.append(f"{base}_ptr" if name in sig.scalar_tensors else base)
        elif name in sig.partials:   # [P, M]: its strides along M and between parts, and P
            params += [f"{base}_ptr", f"{base}_s0", f"{base}_sp", f"{base}_parts"]
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
            if out.name in sig.unfinished:   # and its stride between parts: M, not M under m_limit
                params.append(f"red_{out.name}_sp")
    return params


def epilogue_args(program: Program, sig: Signature, gluon: bool = False) -> list[str]:
    """What the mainloop passes to the epilogue: the kernel parameters, with, for every tile in
    `sig.tma`, a descriptor in place of pointer and strides (Triton), or (Gluon) the shared-memory
    buffer the tile is staged in, after the descriptor for an output."""
    args = []
    for param in kernel_params(program, sig):
        base, _, field = param.rpartition("_")
        if base not in sig.tma:
            args.append(param)
        elif field != "ptr":
            continue  # a stride: the descriptor has it
        elif not gluon:
            args.append(f"{base}_desc")
        elif base.startswith("op_"):
            args.append(f"{base}_smem")
        else:
            args += [f"{base}_desc", f"{base}_smem", *[f"{base}_smem_hi"] * packed(program, base)]
    return args


def packed(program: Program, base: str) -> bool:
    """Whether the output `out_y` is a pack(...): [M, 2N], its slices staged in two halves."""
    return program.widths.outputs[base[4:]] == DOUBLE


def half_width(program: Program, base: str) -> bool:
    """Whether the tile operand `op_x` or output `out_y` lies in the [M, N/2] domain."""
    if base.startswith("op_"):
        return program.widths.operands.get(base[3:]) == {HALF}
    return program.widths.outputs[base[4:]] == HALF


def _tma_tiles(program: Program, sig: Signature) -> list[tuple[str, bool]]:
    """(name, whether in the [M, N/2] domain) of every tile read or written through TMA."""
    return [(base, half_width(program, base)) for base in sorted(sig.tma)]


def descriptor_prologue(program: Program, sig: Signature) -> str:
    """Kernel-prologue lines that make the TMA descriptors of `sig.tma` (one per program)."""
    lines = []
    for base, half in _tma_tiles(program, sig):
        cols, block = ("N // 2", "EPILOGUE_N // 2") if half else ("N", "EPILOGUE_N")
        lines.append(f"    {base}_desc = tl.make_tensor_descriptor({base}_ptr, shape=[M, {cols}], "
                     f"strides=[{base}_s0, 1], block_shape=[BLOCK_M, {block}])")
    return "\n".join(lines)


def pingpong_parts(program: Program, sig: Signature) -> dict[str, str]:
    """The program-specific pieces of the Gluon ping-pong mainloop (codegen/mainloops.py).

    Every TMA tile gets a descriptor and shared-memory buffers of [BLOCK_M, slice width]:
    a tile operand one per column slice per warpgroup, filled by TMA when the warpgroup starts
    the tile's K loop (so the load runs under the MMAs) and waited for before the epilogue;
    an output one per warpgroup, written by the epilogue and stored by TMA without waiting,
    or, for an output in `sig.reuse`, its operand's buffer of the slice (a packed output, twice
    the slice's width: two operands' buffers, a half in each, stored as two boxes): then it needs
    no shared memory of its own, and no wait until the next tile's operands are fetched.

    With `sig.shared_tiles` the two warpgroups' operands take turns in one set of buffers, half
    the shared memory (room for a deeper ring where several operands are staged): a warp of
    their own (OPERAND_PARTITION) fetches a tile's operands once the other warpgroup's
    epilogue, which runs under that tile's K loop, is done with them and with the stores from
    them (`tiles_free`)."""
    tiles = _tma_tiles(program, sig)
    operands = [base for base, _ in tiles if base.startswith("op_")]
    reuse = dict(sig.reuse)
    shared = sig.shared_tiles and bool(operands)
    buffer = "j" if shared else "WG * EPILOGUE_SPLIT + j"   # a warpgroup's buffer of slice j
    prologue = []
    for base, half in tiles:
        cols, block = ("N // 2", "BLOCK_N // EPILOGUE_SPLIT // 2") if half else (
            "N", "BLOCK_N // EPILOGUE_SPLIT")
        if base.startswith("out_") and packed(program, base):   # a half of the packed slice
            cols = "N * 2"
        count = ("EPILOGUE_SPLIT" if shared else "2 * EPILOGUE_SPLIT") if base in operands else "2"
        prologue += [
            f"{base}_layout: gl.constexpr = smem_layout(BLOCK_M, {block}, {base}_ptr.dtype.element_ty)",
            f"{base}_desc = tma.make_tensor_descriptor({base}_ptr, [M, {cols}], [{base}_s0, 1], "
            f"[BLOCK_M, {block}], {base}_layout)"]
        if base not in reuse:
            prologue.append(f"{base}_bufs = gl.allocate_shared_memory({base}_ptr.dtype.element_ty, "
                            f"[{count}, BLOCK_M, {block}], {base}_layout)")
    partition_args, slice_args = [], []
    for param in kernel_params(program, sig):
        base, _, field = param.rpartition("_")
        if base not in sig.tma:
            partition_args.append(param)
            slice_args.append(param)
        elif field != "ptr":
            continue
        elif base in operands:
            partition_args += [f"{base}_desc", f"{base}_bufs"]
            slice_args.append(f"{base}_bufs.index({buffer})")
        elif base in reuse:
            partition_args.append(f"{base}_desc")
            slice_args += [f"{base}_desc", *(f"{operand}_bufs.index({buffer})" for operand in reuse[base])]
        else:
            partition_args += [f"{base}_desc", f"{base}_bufs"]
            slice_args += [f"{base}_desc", f"{base}_bufs.index(WG)"]
    parts = {"{PREFETCH}": "", "{TILES_WAIT}": "", "{TILES_FREE}": "", "{OPERAND_PARTITION}": "",
             "{OPERAND_WORKER}": "", "{OPERAND_WARPS}": "", "{OPERAND_REGS}": ""}
    if operands:
        prologue += ["tiles_ready = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())",
                     "mbarrier.init(tiles_ready.index(0), count=1)",
                     "mbarrier.init(tiles_ready.index(1), count=1)"]
        partition_args.append("tiles_ready")
        nbytes = " + ".join(f"{base}_desc.block_type.nbytes" for base in operands)
        # every warp of the warpgroup has read the buffers (a thread issues the TMA copies), and
        # outputs staged in them are read by their TMA stores until these end
        done_with_buffers = ["gl.thread_barrier()", *["tma.store_wait(0)"] * bool(reuse),
                             "fence_async_shared()  # the reads of the buffers come first"]
        fetch = [f"mbarrier.expect(tiles_ready.index(WG), EPILOGUE_SPLIT * ({nbytes}))",
                 "for j in gl.static_range(EPILOGUE_SPLIT):"]
        for base in operands:
            block = f"{base}_desc.block_type.shape[1]"
            fetch.append(f"    tma.async_copy_global_to_shared({base}_desc, [pid_m * BLOCK_M, "
                         f"(pid_n * EPILOGUE_SPLIT + j) * {block}], tiles_ready.index(WG), "
                         f"{base}_bufs.index({buffer}))")
        parts["{TILES_WAIT}"] = "        mbarrier.wait(tiles_ready.index(WG), rounds & 1)"
        if shared:
            prologue += ["tiles_free = gl.allocate_shared_memory(gl.int64, [1, 1], "
                         "mbarrier.MBarrierLayout())", "mbarrier.init(tiles_free.index(0), count=1)"]
            partition_args.append("tiles_free")
            parts["{TILES_FREE}"] = "\n".join("        " + line for line in [
                *done_with_buffers, "mbarrier.arrive(tiles_free.index(0), count=1)"])
            operand_args = ", ".join(f"{base}_desc, {base}_bufs" for base in operands)
            parts["{OPERAND_PARTITION}"] = OPERAND_PARTITION.format(
                ARGS=operand_args, FETCH="\n".join("        " + line for line in fetch))
            parts["{OPERAND_WORKER}"] = ("\n        (operand_partition, (tiles_ready, tiles_free, "
                                         f"{operand_args}, M, N, BLOCK_M, BLOCK_N, GROUP_M, "
                                         "EPILOGUE_SPLIT)),")
            parts["{OPERAND_WARPS}"], parts["{OPERAND_REGS}"] = ", 1", ", LOAD_REGS"
        else:
            parts["{PREFETCH}"] = "\n".join("        " + line for line in done_with_buffers + fetch)
    join = "".join
    return parts | {"{PROLOGUE}": "\n".join("    " + line for line in prologue),
                    "{PARTITION_ARGS}": join(f", {a}" for a in partition_args),
                    "{SLICE_ARGS}": join(f", {a}" for a in slice_args)}


def generate_epilogue(program: Program, sig: Signature, gluon: bool = False, input_zero: bool = False) -> str:
    """The source of `epilogue(acc, pid_m, tile_n, M, N, seed, ..., BLOCK_M, BLOCK_N)`.

    With `gluon` (the ping-pong mainloop) the tensors made from nothing, index ranges and
    constants, take the layout of the values they meet (the accumulator's, or that of its column
    pairs after `unpack`), and TMA tiles are read from and written to the shared-memory buffers
    the mainloop stages them in; the rest of the code is the same for both front ends.
    `input_zero` says the mainloop's accumulator is zero past the output's edges (its A and B
    are read zero-filled there): reductions of values that are then zero too need no masks
    (passes/edges.py)."""
    return _Emitter(program, sig, gluon, input_zero).run()


def store_order(outputs: list) -> list:
    """The order the epilogue stores its outputs in: the reductions' partials, then the tiles.
    In the ping-pong kernel a tile leaves through a shared-memory buffer by an asynchronous TMA
    store that the next slice's store of that output waits for; stored last, it has the next
    slice's whole computation, reductions included, to complete in."""
    return sorted(outputs, key=lambda out: out.reduction is None)


class _Emitter:
    def __init__(self, program: Program, sig: Signature, gluon: bool, input_zero: bool):
        self.program = program
        self.input_zero = input_zero
        self.gluon = gluon  # Gluon: new tensors need a layout (see generate_epilogue)
        self.kinds = dict(sig.kinds)
        self.sig = sig
        self.domains = program.widths.nodes
        self.lines: list[str] = []
        self.names: dict[Node, str] = {}
        self.unpacked: dict[Node, tuple[str, str]] = {}

    def emit(self, line: str) -> None:
        self.lines.append("    " + line)

    def arange(self, size: str, axis: int, like: str) -> str:
        """`arange(0, size)` along `axis` (0: rows, 1: columns) of tiles laid out like `like`."""
        if self.gluon:
            return f"gl.arange(0, {size}, layout=gl.SliceLayout({1 - axis}, {like}.type.layout))"
        return f"tl.arange(0, {size})"

    def full(self, value: str, width: str) -> str:
        """A [1, 1] float32 tensor of `value` in `width`'s domain."""
        if self.gluon:
            return f"gl.full((1, 1), {value}, tl.float32, layout={_DOMAIN[width].like}.type.layout)"
        return f"tl.full((1, 1), {value}, tl.float32)"

    def tile_shape(self, width: str) -> str:
        return f"(BLOCK_M, {_DOMAIN[width].block})"

    def mask2d(self, width: str) -> str:
        d = _DOMAIN[width]
        return f"{d.mask_rows}[:, None] & {d.mask_cols}[None, :]"

    def broadcast(self, node: Node, width: str) -> str:
        """`node`'s value as a whole tile of the `width` domain, where unpack, pack or rope reads
        it: a value that does not depend on the column (a constant, a row operand) is one node
        in both domains, in the [M, N] one by its own."""
        return f"tl.broadcast_to({self.arg(node, width)}, {self.tile_shape(width)})"

    def run(self) -> str:
        params = ", ".join(["acc", "pid_m", "tile_n", "M", "N", "seed",
                            *epilogue_args(self.program, self.sig, self.gluon), "BLOCK_M: tl.constexpr",
                            "BLOCK_N: tl.constexpr", "RAGGED_N: tl.constexpr = True"])
        self.emit(f"rows = pid_m * BLOCK_M + {self.arange('BLOCK_M', 0, 'acc')}")
        self.emit(f"cols = tile_n * BLOCK_N + {self.arange('BLOCK_N', 1, 'acc')}")
        self.emit("mask_m = rows < M")
        # a caller that knows the tile's columns all lie below N says so (RAGGED_N=False): the
        # column masks are then constant along the tile, and its stores vectorize
        self.emit("col_end = N if RAGGED_N else (tile_n + 1) * BLOCK_N")
        self.emit(f"mask_n = cols < {_COL_END['full']}")
        if any(w == HALF for w in self.domains.values()):
            if self.gluon:  # the layout `unpack` gives: a split of the accumulator
                self.emit("half_like = tl.split(tl.reshape(acc, (BLOCK_M, BLOCK_N // 2, 2)))[0]")
                self.emit(f"hrows = pid_m * BLOCK_M + {self.arange('BLOCK_M', 0, 'half_like')}")
                self.emit("mask_hm = hrows < M")
            else:
                self.emit("hrows = rows")
                self.emit("mask_hm = mask_m")
            self.emit(f"hcols = tile_n * (BLOCK_N // 2) + {self.arange('BLOCK_N // 2', 1, 'half_like')}")
            self.emit(f"mask_h = hcols < {_COL_END[HALF]}")
        if any(w == DOUBLE for w in self.domains.values()):
            if self.gluon:  # the layout `pack` gives: a join of two accumulator-like tiles
                self.emit("double_like = tl.reshape(tl.join(acc, acc), (BLOCK_M, BLOCK_N * 2))")
                self.emit(f"drows = pid_m * BLOCK_M + {self.arange('BLOCK_M', 0, 'double_like')}")
                self.emit("mask_dm = drows < M")
            else:
                self.emit("drows = rows")
                self.emit("mask_dm = mask_m")
            self.emit(f"dcols = tile_n * (BLOCK_N * 2) + {self.arange('BLOCK_N * 2', 1, 'double_like')}")
            self.emit(f"mask_d = dcols < {_COL_END[DOUBLE]}")
        for index, node in enumerate(self.program.ir.nodes()):
            if node.op == "operand" and self.kinds[node.arg] == "head":
                self.names[node] = f"op_{node.arg}"  # read by rope, which knows its pair indices
                continue
            self.names[node] = f"v{index}"
            self.emit(f"v{index} = {self.value(node)}")
        for out in store_order([o for o in self.program.ir.outputs if o.name in self.sig.outputs]):
            self.store(out)
        body = "\n".join(self.lines)
        return f"@triton.jit\ndef epilogue({params}):\n{body}\n"

    # values -----------------------------------------------------------------------------------
    def arg(self, node: Node, width: str) -> str:
        """`node`'s value where a `width` value uses it. Only values that do not depend on the
        column (constants, scalars, row operands) meet both domains; Gluon moves them over."""
        name = self.names[node]
        if self.gluon and self.domains[node] != width:
            return f"gl.convert_layout({name}, {_DOMAIN[width].like}.type.layout)"
        return name

    def value(self, node: Node) -> str:
        op, width = node.op, self.domains[node]
        d = _DOMAIN[width]
        args = [self.names[a] if op == "unpack" else self.arg(a, width) for a in node.args]
        if op == "input":
            return "acc"
        if op == "const":
            value = float(node.arg)
            if value == 0.0 and math.copysign(1.0, value) < 0:   # tl.full makes any zero +0
                return f"{self.full('0.0', width)} * -1.0"
            return self.full(float_literal(value), width)
        if op == "operand":
            return self.load_operand(node.arg, width, self.names[node])
        if op == "prior":
            return self.load_tile("out_output", width)
        if op == "unpack":
            return self.unpack(node)
        if op == "pack":
            joined = ", ".join(self.broadcast(a, UNPACKED[width]) for a in node.args)
            packed = f"tl.reshape(tl.join({joined}), {self.tile_shape(width)})"
            if self.gluon and width == FULL:  # back in the accumulator's layout
                return f"gl.convert_layout({packed}, acc.type.layout)"
            return packed
        if op == "dropout":
            x = f"tl.broadcast_to({args[0]}, {self.tile_shape(width)})"
            p = f"cm.probability({args[1]})"
            return PRIMITIVES["dropout"].triton.format(x, p, keep=self.keep(node, x, p))
        if op == "rope":
            return self.rope(node)
        if op in ("col_index", "row_index"):
            return PRIMITIVES[op].triton.format(cols=d.cols, rows=d.rows)
        return PRIMITIVES[op].triton.format(*args)

    def keep(self, node: Node, x: str, p: str) -> str:
        """Dropout's keep mask for the tile of `node`: 16-bit random numbers (tl_math.random_bits)
        at or above p's threshold. Gluon draws them in the accumulator's layout, where a thread
        holds whole blocks of the stream; values of the half-width domain (whose threads hold
        single columns) draw in `_DRAW_LAYOUT` and move over."""
        width = self.domains[node]
        d = _DOMAIN[width]
        rows, cols = d.rows, d.cols
        if self.gluon and width != "full":
            v = self.names[node]
            self.emit(f"{v}_rows = pid_m * BLOCK_M + gl.arange(0, BLOCK_M, "
                      f"layout=gl.SliceLayout(1, {_DRAW_LAYOUT}))")
            self.emit(f"{v}_cols = tile_n * {d.block} + gl.arange(0, {d.block}, "
                      f"layout=gl.SliceLayout(0, {_DRAW_LAYOUT}))")
            rows, cols = f"{v}_rows", f"{v}_cols"
        bits = f"cm.random_bits(seed, {rows}, {cols}, BLOCK_M, {d.block})"
        if self.gluon:
            bits = f"gl.convert_layout({bits}, {x}.type.layout)"
        return f"{bits} >= cm.keep_threshold({p})"

    def load_operand(self, name: str, width: str, v: str) -> str:
        kind, base, d = self.kinds[name], f"op_{name}", _DOMAIN[width]
        if kind == "scalar":
            # times one, not plus zero: a -0.0 keeps its sign (+0.0 + -0.0 is +0.0)
            value = f"tl.load({base}_ptr).to(tl.float32)" if name in self.sig.scalar_tensors else base
            return f"{self.full('1.0', width)} * {value}"
        if kind in ("row", "col"):
            index, mask, axis = (d.rows, d.mask_rows, "[:, None]") if kind == "row" else (
                d.cols, d.mask_cols, "[None, :]")

            def load(part: str = "") -> str:
                return (f"tl.load({base}_ptr + {part}{index} * {base}_s0, mask={mask}, "
                        f"other=0.0).to(tl.float32)")
            if name not in self.sig.partials:
                return f"{load()}{axis}"
            # Partials: each value's parts added in index order, in a loop (unrolled, all the
            # loads in flight at once spilled 1.4 KB a thread in the ping-pong kernel)
            self.emit(f"{v}_sum = {load()}")
            self.emit(f"for part in range(1, {base}_parts):")
            self.emit(f"    {v}_sum += {load(f'part * {base}_sp + ')}")
            return f"{v}_sum{axis}"
        return self.load_tile(base, width)

    def load_tile(self, base: str, width: str) -> str:
        d = _DOMAIN[width]
        if base in self.sig.tma and self.gluon:  # staged in shared memory by the mainloop
            return f"cm.to_float({base}_smem.load({d.like}.type.layout))"
        if base in self.sig.tma:
            return f"cm.to_float({base}_desc.load([pid_m * BLOCK_M, tile_n * {d.block}]))"
        ptr = f"{base}_ptr + {d.rows}[:, None] * {base}_s0 + {d.cols}[None, :] * {base}_s1"
        return f"cm.to_float(tl.load({ptr}, mask={self.mask2d(width)}, other=0.0))"

    def unpack(self, node: Node) -> str:
        source = node.args[0]
        if source not in self.unpacked:
            pair = (f"{self.names[source]}_first", f"{self.names[source]}_second")
            self.emit(f"{pair[0]}, {pair[1]} = tl.split(tl.reshape({self.broadcast(source, FULL)}, "
                      f"(BLOCK_M, BLOCK_N // 2, 2)))")
            self.unpacked[source] = pair
        return self.unpacked[source][node.arg]

    def rope(self, node: Node) -> str:
        x, cos, sin = node.args
        v = self.names[node]
        width = self.domains[node]
        block = _DOMAIN[width].block
        self.emit(f"{v}_x0, {v}_x1 = tl.split(tl.reshape({self.broadcast(x, width)}, "
                  f"(BLOCK_M, {block} // 2, 2)))")
        rows, mask = "rows", "mask_m"
        if self.gluon:  # the pairs' layout (a split) is not the tile's
            rows, mask = f"{v}_rows", f"{v}_mask"
            self.emit(f"{rows} = pid_m * BLOCK_M + {self.arange('BLOCK_M', 0, f'{v}_x0')}")
            self.emit(f"{mask} = {rows} < M")
        self.emit(f"{v}_pair = tile_n * ({block} // 2) + {self.arange(f'{block} // 2', 1, f'{v}_x0')}")
        for table, short in ((cos, "cos"), (sin, "sin")):
            base = f"op_{table.arg}"
            ptr = f"{base}_ptr + {rows}[:, None] * {base}_s0 + ({v}_pair % {base}_h)[None, :] * {base}_s1"
            self.emit(f"{v}_{short} = tl.load({ptr}, mask={mask}[:, None], other=0.0).to(tl.float32)")
        rotated = (f"tl.reshape(tl.join({v}_x0 * {v}_cos - {v}_x1 * {v}_sin, "
                   f"{v}_x1 * {v}_cos + {v}_x0 * {v}_sin), (BLOCK_M, {block}))")
        if self.gluon:  # back in the tile's own layout (the same data placement, renamed)
            return f"gl.convert_layout({rotated}, {_DOMAIN[width].like}.type.layout)"
        return rotated

    # outputs ----------------------------------------------------------------------------------
    def store_staged(self, base: str, value: str, d: _Domain) -> None:
        """Gluon: an output tile through this warpgroup's buffer, once the store that last read
        it is done (a slice's buffer of an operand is free: the epilogue has read it), then by
        TMA; a packed tile as two halves of its columns, each in a buffer and a box of its own."""
        if base not in dict(self.sig.reuse):
            in_flight = sum(1 + packed(self.program, b) for b in self.sig.tma if b.startswith("out_")) - 1
            self.emit(f"tma.store_wait({in_flight})")
        halves = [(value, f"{base}_smem", "")]
        if packed(self.program, base):
            self.emit(f"{base}_lo, {base}_hi = column_halves({value}, BLOCK_M, BLOCK_N * 2)")
            halves = [(f"{base}_lo", f"{base}_smem", ""), (f"{base}_hi", f"{base}_smem_hi", " + BLOCK_N")]
        for part, smem, _ in halves:
            self.emit(f"{smem}.store({part}.to({base}_desc.dtype))")
        self.emit("fence_async_shared()")
        for _, smem, offset in halves:
            self.emit(f"tma.async_copy_shared_to_global({base}_desc, [pid_m * BLOCK_M, "
                      f"tile_n * {d.block}{offset}], {smem})")

    def store(self, out) -> None:
        width = self.program.widths.outputs[out.name]
        d = _DOMAIN[width]
        value = f"tl.broadcast_to({self.arg(out.value, width)}, {self.tile_shape(width)})"
        if out.reduction is None:
            base = f"out_{out.name}"
            if base in self.sig.tma and self.gluon:
                self.store_staged(base, value, d)
                return
            if base in self.sig.tma:
                self.emit(f"{base}_desc.store([pid_m * BLOCK_M, tile_n * {d.block}], "
                          f"{value}.to({base}_desc.dtype))")
                return
            if base in self.sig.wide:
                self.emit(f"store_wide({base}_ptr, {base}_s0, pid_m * BLOCK_M, tile_n * {d.block}, "
                          f"{value}.to({base}_ptr.dtype.element_ty), M, {_COL_END[width]})")
                return
            ptr = f"{base}_ptr + {d.rows}[:, None] * {base}_s0 + {d.cols}[None, :] * {base}_s1"
            self.emit(f"tl.store({ptr}, {value}.to({base}_ptr.dtype.element_ty), "
                      f"mask={self.mask2d(width)})")
            return
        is_max = out.reduction in ("row_max", "col_max", "row_logsumexp")
        fill = "float('-inf')" if is_max else "0.0"
        part = f"{out.name}_tile"
        combine = "cm.max_keeping_nan" if is_max else "tl.sum"
        # Past the edge along the reduced axis a value must not count (past it along the other
        # axis the partial is not stored); where it is zero there already, a sum needs no mask.
        across = "row" if out.axis == "col" else "col"
        if is_max or not zero_past_edge(out.value, across, self.kinds, self.input_zero):
            mask = f"{d.mask_rows}[:, None]" if across == "row" else f"{d.mask_cols}[None, :]"
            value = f"tl.where({mask}, {value}, {fill})"
        self.emit(f"{part} = {value}")
        if out.axis == "col":
            self.emit(f"tl.store(red_{out.name}_ptr + pid_m * {d.size} + {d.cols}, "
                      f"{combine}({part}, axis=0), mask={d.mask_cols})")
            return
        # a column slice wholly past N (Hopper's split epilogue, ragged N) has no partial row
        mask = f"{d.mask_rows} & (tile_n * BLOCK_N < N)"
        if out.reduction == "row_logsumexp":
            self.emit(f"{part}_max = tl.max({part}, axis=1)")
            # a row whose maximum is infinite (past M, -inf logits, a +inf) shifts by 0: exp(inf -
            # inf) would be NaN, and the sum is then 0 or inf, as torch.logsumexp's result
            self.emit(f"{part}_shift = tl.where(tl.abs({part}_max) == float('inf'), 0.0, {part}_max)")
            self.emit(f"tl.store(red_{out.name}_max + tile_n * M + {d.rows}, {part}_max, mask={mask})")
            self.emit(f"tl.store(red_{out.name}_sum + tile_n * M + {d.rows}, "
                      f"tl.sum(cm.exp({part} - {part}_shift[:, None]), axis=1), mask={mask})")
        else:
            # a finished sum's parts lie M (under m_limit, the limit) apart, as the finishing
            # kernel reads them; parts left unfinished go where the caller's [P, M] reads them
            stride = f"red_{out.name}_sp" if out.name in self.sig.unfinished else "M"
            self.emit(f"tl.store(red_{out.name}_ptr + tile_n * {stride} + {d.rows}, "
                      f"{combine}({part}, axis=1), mask={mask})")
