"""Binding a launch: check A, B, the operands and the options, and settle every output's shape.

Everything a user can get wrong at a launch is caught here with a `LaunchError` that names the
operand and says what was expected, before any backend sees the tensors.
"""

from __future__ import annotations

import difflib
import numbers
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from ..errors import LaunchError
from ..ir import A_COL_SUMS
from ..passes import infer_kinds
from ..passes.widths import columns
from .partials import Partials
from .rng import seed_word

if TYPE_CHECKING:
    from .program import Program

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


@dataclass(frozen=True)
class OutputSpec:
    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    reduction: str | None


#: The most pieces a `Concat` operand may have (the kernels take that many pointers).
MAX_PIECES = 4


@dataclass(frozen=True)
class Concat:
    """`torch.cat(pieces, dim)` of 2-D tensors, given to a GEMM as its A operand, or to a map as
    its input, without being formed: the kernel reads each piece where it lies. Concatenated
    along K (`dim=1` of A) the K loop walks the pieces in turn; along M (`dim=0`) each row block
    of the output reads its own piece; in a map each tile reads its own piece. `.T` is the
    concatenation of the transposes (an A given transposed, as a weight gradient's `dy.T` is).
    Every piece has one dtype, device and stride pattern.

        dx = prog(coda.Concat((dq, dk, dv), dim=1), w_qkv)      # (dq | dk | dv) @ w_qkv
        dw = prog(coda.Concat((dq, dk, dv), dim=1).T, x)        # (dq | dk | dv).T @ x
        db = sums.map(coda.Concat((dq, dk, dv), dim=1))        # column sums of (dq | dk | dv)
    """

    pieces: tuple[torch.Tensor, ...]
    dim: int

    def __post_init__(self):
        pieces, dim = tuple(self.pieces), self.dim
        object.__setattr__(self, "pieces", pieces)
        if dim not in (0, 1) or isinstance(dim, bool):
            raise LaunchError(f"Concat: dim must be 0 or 1, got {dim!r}")
        if not 1 <= len(pieces) <= MAX_PIECES:
            raise LaunchError(f"Concat: takes 1 to {MAX_PIECES} pieces, got {len(pieces)}")
        for i, piece in enumerate(pieces):
            _check_matrix(f"Concat piece {i}", piece)
            first = pieces[0]
            if (piece.dtype, piece.device) != (first.dtype, first.device):
                raise LaunchError(f"Concat: piece {i} is {piece.dtype} on {piece.device}, piece 0 "
                                  f"{first.dtype} on {first.device}; they must match")
            if piece.shape[1 - dim] != first.shape[1 - dim]:
                raise LaunchError(f"Concat along dim {dim}: piece {i} has shape {list(piece.shape)}, "
                                  f"piece 0 {list(first.shape)}; their dim {1 - dim} must match")

    @property
    def shape(self) -> torch.Size:
        sizes = list(self.pieces[0].shape)
        sizes[self.dim] = sum(p.shape[self.dim] for p in self.pieces)
        return torch.Size(sizes)

    @property
    def T(self) -> Concat:
        return Concat(tuple(p.T for p in self.pieces), 1 - self.dim)

    def materialize(self) -> torch.Tensor:
        return torch.cat(self.pieces, self.dim)


@dataclass
class Launch:
    """One bound launch: the program, the GEMM operands and sizes (`b` None for a map, whose
    `input` is `a`), and the epilogue's operands. An A given as a `Concat` is its first piece
    here, the Concat itself in `concat` (None for one tensor)."""

    program: Program
    a: torch.Tensor
    b: torch.Tensor | None
    m: int
    n: int
    k: int
    kinds: dict[str, str]
    values: dict[str, object]
    outputs: tuple[OutputSpec, ...]
    out: torch.Tensor | None
    seed: int
    concat: Concat | None
    m_limit: torch.Tensor | None = None
    k_limit: torch.Tensor | None = None
    unfinished: frozenset[str] = frozenset()   # sums returned as Partials

    @property
    def a_pieces(self) -> tuple[torch.Tensor, ...]:
        return self.concat.pieces if self.concat else (self.a,)

    def whole_a(self) -> torch.Tensor:
        """A as one tensor (a Concat's pieces joined: the reference backend's input)."""
        return self.concat.materialize() if self.concat else self.a

    def allocate_outputs(self) -> dict[str, torch.Tensor]:
        """Fresh output tensors (the primary one is `out=` when given)."""
        tensors = {}
        for spec in self.outputs:
            if spec.name == "output" and self.out is not None:
                tensors[spec.name] = self.out
            else:
                tensors[spec.name] = torch.empty(spec.shape, dtype=spec.dtype, device=self.a.device)
        return tensors




def bind(program: Program, a, b, operands: dict, *, out=None, out_dtype=None, seed=None,
         outputs=None, dtypes=None, m_limit=None, k_limit=None, a_col_sums=False,
         unfinished=None) -> Launch:
    """Validate a launch of `program` and resolve operand kinds and output shapes.

    With `b` None the launch is a map: `input` is `a` itself ([M, N], a tensor or a Concat), no
    GEMM runs. `outputs`
    names the outputs to produce (default: all); the others are neither computed nor written.
    `dtypes` maps output names to the dtype each is stored in (default: tiles in `out_dtype`,
    reductions in float32). A `Concat` A stays in pieces (`Launch.concat`). `m_limit` and
    `k_limit` are one-element integer tensors on A's device: the launch runs as if M (K) were
    min(M, m_limit) (min(K, k_limit)), read on the device (no synchronization; `check_limit`).
    `a_col_sums` adds the output "a_col_sums" [K]: the sums of A's columns over its M rows (a
    bias gradient, where A is the output gradient of a biased layer), taken in the GEMM's K loop
    from the tiles it loads anyway (float32, or what `dtypes=` names). `unfinished` names row
    sums (`row_sum` outputs, or "a_col_sums") to return as `Partials`, their tiles' partials
    not added up."""
    concat = a if isinstance(a, Concat) else None
    if b is None:
        if not concat:
            _check_matrix("X", a)
        (m, n), k = a.shape, 0
        a = concat.pieces[0] if concat else a
    else:
        if not concat:
            _check_matrix("A", a)
        _check_matrix("B", b)
        (m, k), (k2, n) = a.shape, b.shape
        if k != k2:
            raise LaunchError(f"A is [M, K] = {list(a.shape)} and B is [K, N] = {list(b.shape)}: "
                              f"their K differ ({k} vs {k2})")
        a = concat.pieces[0] if concat else a
        if b.device != a.device:
            raise LaunchError(f"B is on {b.device} but A is on {a.device}")
        if b.dtype != a.dtype:   # on both backends: code tried on the CPU runs the same on a GPU
            raise LaunchError(f"A is {a.dtype} but B is {b.dtype}: a GEMM takes one input dtype; "
                              f"cast one of them")
    epi = program.ir
    if program.has_unpack and n % 2:
        raise LaunchError(f"the program unpacks column pairs, so N must be even; got N = {n}")
    for width in program.rope_domains:
        if columns(width, n) % 2:
            raise LaunchError(f"rope rotates column pairs: the rotated value needs an even number "
                              f"of columns; it has {columns(width, n)} (N = {n})")
    values = _operand_values(epi, operands, a.device)
    kinds = infer_kinds(epi, program.widths, m, n, values)
    for cos, sin in program.rope_tables:
        if values[cos].shape != values[sin].shape:
            raise LaunchError(f"rope's tables {cos!r} and {sin!r} must have one shape [M, H]: got "
                              f"{list(values[cos].shape)} and {list(values[sin].shape)}")
    check_per_call(program.probabilities, values, seed)
    if out_dtype is None:
        if isinstance(out, torch.Tensor) and not out.is_floating_point():
            raise LaunchError(f"out= has dtype {out.dtype}; the output is floating point (float16, "
                              f"bfloat16, float32 or float64)")
        out_dtype = out.dtype if isinstance(out, torch.Tensor) else a.dtype
    if not isinstance(a_col_sums, bool):
        raise LaunchError(f"a_col_sums= must be True or False, got {a_col_sums!r}")
    if a_col_sums and b is None:
        raise LaunchError("a_col_sums= sums the columns of a GEMM's A: a map has none")
    if a_col_sums and k_limit is not None:
        raise LaunchError("a_col_sums= and k_limit= cannot be combined (columns past the limit "
                          "would have no sums)")
    if a_col_sums and outputs is not None and A_COL_SUMS in outputs:
        raise LaunchError(f"outputs=: {A_COL_SUMS!r} is asked for by a_col_sums=True, not by name")
    specs = _output_specs(program, m, n, out_dtype)
    if a_col_sums:
        specs += (OutputSpec(A_COL_SUMS, (k,), torch.float64 if out_dtype == torch.float64
                             else torch.float32, "col_sum_a"),)
    specs = _stored_as(specs, dtypes)
    if out is not None:
        _check_out(out, specs[0], a.device)
        check_out_per_call(concat or a, b, out, values, tile_operands(kinds))
    elif epi.accumulates:
        raise LaunchError("the program accumulates into `output` (it reads the prior output, as "
                          "`output += ...` does): pass the tensor to accumulate into as out=")
    if epi.uses_dropout and seed is None:
        raise LaunchError("the program uses dropout: pass an integer seed= (got None)")
    seed = seed_word(seed)
    selected = _select(specs, outputs, extra=A_COL_SUMS if a_col_sums else None)
    if epi.accumulates and selected[0].name != "output":
        raise LaunchError("the program accumulates into `output`: outputs= must include 'output'")
    if out is not None and selected[0].name != "output":
        raise LaunchError("out= is where 'output' goes, but outputs= leaves 'output' out: include it, "
                          "or drop out=")
    check_limit("m_limit", m_limit, a.device)
    check_limit("k_limit", k_limit, a.device)
    if k_limit is not None and b is None:
        raise LaunchError("k_limit= bounds a GEMM's K: a map has none")
    return Launch(program, a, b, m, n, k, kinds, values, selected, out, seed, concat, m_limit, k_limit,
                  _unfinished(unfinished, selected, dtypes, m_limit))


def _unfinished(names, selected: tuple[OutputSpec, ...], dtypes, m_limit) -> frozenset[str]:
    """The outputs `unfinished=` names: row sums the launch writes (or A's column sums), stored
    as float32 partials (so not in `dtypes=`)."""
    if names is None:
        return frozenset()
    if not _is_name_list(names):
        raise LaunchError(f"unfinished= takes a list of output names, got {names!r}")
    specs = {s.name: s for s in selected}
    for name in names:
        spec = specs.get(name)
        if spec is None or spec.reduction not in ("row_sum", "col_sum_a"):
            sums = ", ".join(s.name for s in selected if s.reduction in ("row_sum", "col_sum_a")) or "none"
            raise LaunchError(f"unfinished=: {name!r} is not a row sum (or 'a_col_sums') that this "
                              f"launch writes; it writes: {sums}")
        if spec.reduction == "col_sum_a" and m_limit is not None:
            raise LaunchError(f"unfinished=: {name!r} under m_limit= would add the parts of row "
                              f"blocks past the limit, which are not written")
        if dtypes and name in dtypes:
            raise LaunchError(f"unfinished=: {name!r} comes back as float32 partials; it takes no "
                              f"dtype in dtypes=")
    return frozenset(names)


def check_limit(name: str, limit, device: torch.device) -> None:
    """A row or depth limit is None or a one-element integer tensor on the launch's device: its
    value stays there (a count of rows known only on the device, such as the targets that are
    not ignored, bounds the work without a synchronization, also in a CUDA graph). Rows past
    the limit are not computed: their outputs keep what they held, their reductions are not
    finished."""
    if limit is None:
        return
    if (not isinstance(limit, torch.Tensor) or limit.numel() != 1
            or limit.dtype not in (torch.int32, torch.int64)):
        raise LaunchError(f"{name}= must be a one-element int32 or int64 tensor, got "
                          f"{describe(limit)}")
    if limit.device != device:
        raise LaunchError(f"{name}= is on {limit.device} but A is on {device}")


def describe(x: object) -> str:
    """What a bad argument was, for the message (the ops' checks use it too)."""
    if isinstance(x, torch.Tensor):
        return f"a {x.dtype} tensor of shape {list(x.shape)}"
    return type(x).__name__


def _stored_as(specs: tuple[OutputSpec, ...], dtypes) -> tuple[OutputSpec, ...]:
    """The specs with the dtypes that `dtypes=` names (a reduction is still summed in float32
    and rounded once, when stored: a bias gradient stored in the parameter's dtype needs no
    cast kernel after the launch)."""
    if dtypes is None:
        return specs
    if not isinstance(dtypes, dict):
        raise LaunchError(f"dtypes= takes a dict of output name -> torch.dtype, got {dtypes!r}")
    known = [s.name for s in specs]
    for name, dtype in dtypes.items():
        if name not in known:
            raise LaunchError(f"dtypes=: {name!r} is not an output of the program; it has: "
                              f"{', '.join(known)}")
        if not isinstance(dtype, torch.dtype) or dtype not in FLOAT_DTYPES:
            raise LaunchError(f"dtypes=: the dtype of {name!r} must be a floating-point "
                              f"torch.dtype, got {dtype!r}")
    return tuple(OutputSpec(s.name, s.shape, dtypes.get(s.name, s.dtype), s.reduction) for s in specs)


def _select(specs: tuple[OutputSpec, ...], names, extra: str | None = None) -> tuple[OutputSpec, ...]:
    """The specs that `outputs=` names (all when None), and `extra` (asked for otherwise)."""
    if names is None:
        return specs
    if not _is_name_list(names):
        raise LaunchError(f"outputs= takes a list of output names, got {names!r}")
    names = [*names, *([extra] if extra else [])]
    known = [s.name for s in specs]
    unknown = [n for n in names if n not in known]
    if not names:
        raise LaunchError(f"outputs= names no output; the program has: {', '.join(known)}")
    if unknown:
        raise LaunchError(f"outputs=: {unknown[0]!r} is not an output of the program; it has: "
                          f"{', '.join(known)}")
    return tuple(s for s in specs if s.name in names)


def _is_name_list(names) -> bool:
    """Whether `names` (outputs= or unfinished=) is a collection of names: not a string (its
    letters), nor something that is not iterable at all."""
    return (isinstance(names, Iterable) and not isinstance(names, str)
            and all(isinstance(n, str) for n in names))


def probability_operands(epi) -> tuple[str, ...]:
    """The operands that some dropout takes as its probability."""
    return tuple(dict.fromkeys(node.args[1].arg for node in epi.nodes()
                               if node.op == "dropout" and node.args[1].op == "operand"))


def check_per_call(probabilities: tuple[str, ...], values: dict, seed) -> None:
    """What a launch must check even when its plan is cached (these values are not in the plan's
    key): the seed is an integer, and a dropout probability bound as a number or a CPU tensor
    lies in [0, 1] (a device tensor is not read back: that would synchronize with the device; the
    kernel and the reference take its value outside [0, 1] as the nearest bound)."""
    if seed is not None and (not isinstance(seed, numbers.Integral) or isinstance(seed, bool)):
        raise LaunchError(f"seed= must be an integer, got {seed!r}")
    for name in probabilities:
        p = values.get(name)
        if isinstance(p, torch.Tensor) and p.device.type == "cpu" and p.numel() == 1:
            p = p.item()
        if isinstance(p, numbers.Real) and not 0.0 <= p <= 1.0:
            raise LaunchError(f"operand {name!r} is a dropout probability: expected a number in "
                              f"[0, 1], got {p!r}")


#: The shape each matrix of a launch takes, for the error that says it is not 2-D.
_MATRIX_SHAPES = {"A": "[M, K], or [..., M, K] with leading dimensions", "B": "[K, N]",
                  "X": "[M, N], or [..., M, N] with leading dimensions"}


def _check_matrix(name: str, x) -> None:
    if not isinstance(x, torch.Tensor):
        raise LaunchError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    check_strided(name, x)
    if x.dim() != 2:
        shape = _MATRIX_SHAPES.get(name, "[rows, columns]")
        raise LaunchError(f"{name} must be 2-D ({shape}), got shape {list(x.shape)}")
    if x.dtype not in FLOAT_DTYPES:
        raise LaunchError(f"{name} has dtype {x.dtype}; expected one of float16, bfloat16, "
                          f"float32, float64")


def check_strided(name: str, x: torch.Tensor) -> None:
    """Kernels read and write tensors through strides: a sparse (or other non-strided) layout
    has none, and a lazily negated view's memory holds the negatives of its values."""
    if x.layout != torch.strided:
        raise LaunchError(f"{name} has layout {x.layout}; CODA needs a dense (strided) tensor: "
                          f"pass it as .to_dense()")
    if not torch.compiler.is_compiling() and x.is_neg():   # Dynamo cannot trace is_neg
        raise LaunchError(f"{name} is a lazily negated view (PyTorch's negative bit, as `.conj().imag` "
                          f"makes): its memory holds the negatives of its values, which kernels would "
                          f"read or write as they are; pass it as .resolve_neg()")


def _operand_values(epi, operands: dict, device: torch.device) -> dict[str, object]:
    unknown = [name for name in operands if name not in epi.params]
    if unknown:
        name = unknown[0]
        close = difflib.get_close_matches(name, epi.params, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        known = ", ".join(epi.params) or "none"
        raise LaunchError(f"unknown operand {name!r}{hint}; the program's operands are: {known}")
    values = {}
    for name, param in epi.params.items():
        value = operands.get(name, param.default)
        if value is None:
            kind = f" (kind {param.kind})" if param.kind else ""
            raise LaunchError(f"missing operand {name!r}{kind}: pass it by keyword, "
                              f"`prog(a, b, {name}=...)`")
        if isinstance(value, torch.Tensor):
            check_strided(f"operand {name!r}", value)
        if isinstance(value, (torch.Tensor, Partials)):
            if value.device != device:
                raise LaunchError(f"operand {name!r} is on {value.device} but A is on {device}")
            if value.dtype not in FLOAT_DTYPES:
                raise LaunchError(f"operand {name!r} has dtype {value.dtype}; expected a "
                                  f"floating-point tensor")
        values[name] = value
    return values


def _output_specs(program: Program, m: int, n: int, dtype) -> tuple[OutputSpec, ...]:
    if not isinstance(dtype, torch.dtype) or dtype not in FLOAT_DTYPES:
        raise LaunchError(f"out_dtype must be a floating-point torch.dtype, got {dtype!r}")
    reduction_dtype = torch.float64 if dtype == torch.float64 else torch.float32
    specs = []
    for out in program.ir.outputs:
        cols = columns(program.widths.outputs[out.name], n)
        if out.reduction is None:
            specs.append(OutputSpec(out.name, (m, cols), dtype, None))
        else:
            size = m if out.axis == "row" else cols
            specs.append(OutputSpec(out.name, (size,), reduction_dtype, out.reduction))
    return tuple(specs)


def _check_out(out, spec: OutputSpec, device) -> None:
    if not isinstance(out, torch.Tensor):
        raise LaunchError(f"out= must be a torch.Tensor, got {type(out).__name__}")
    check_strided("out=", out)
    if tuple(out.shape) != spec.shape:
        raise LaunchError(f"out=: expected shape {list(spec.shape)}, got {list(out.shape)}")
    if out.dtype != spec.dtype:
        raise LaunchError(f"out=: expected dtype {spec.dtype} (the output dtype), got {out.dtype}")
    if out.device != device:
        raise LaunchError(f"out= is on {out.device} but A is on {device}")
    if any(stride == 0 and size > 1 for size, stride in zip(out.shape, out.stride(), strict=True)):
        raise LaunchError(f"out= has stride 0 along a dimension (strides {list(out.stride())}, an "
                          f"expanded view): its elements would overlap; give a tensor that owns "
                          f"each element")
    if _self_overlapping(out):
        raise LaunchError(f"out= (shape {list(out.shape)}, strides {list(out.stride())}) has elements "
                          f"that share memory: tiles would race to store them; give a tensor that "
                          f"owns each element")


def _self_overlapping(x: torch.Tensor) -> bool:
    """Whether elements of x may share memory: taken by stride, each dimension's stride must pass
    the furthest element the smaller ones reach. Every view that slicing, transposing and
    permuting make passes; an `as_strided` layout that fails it is refused, overlapping or not."""
    if x.numel() == 0:
        return False
    reach = 0
    for stride, size in sorted(zip(x.stride(), x.shape, strict=True)):
        if size > 1:
            if stride <= reach:
                return True
            reach += (size - 1) * stride
    return False


def _check_out_writable(out: torch.Tensor) -> None:
    """PyTorch allows no in-place update of an inference tensor (one made under
    torch.inference_mode) outside inference mode: neither does a launch, on any backend (the
    reference's copy raised PyTorch's error, a kernel wrote it). A plan made inside inference
    mode may serve launches outside it."""
    if out.is_inference() and not torch.is_inference_mode_enabled():
        raise LaunchError("out= is an inference tensor (made under torch.inference_mode), which "
                          "PyTorch does not let a launch outside inference mode update in place: "
                          "launch inside torch.inference_mode(), or pass a clone")


def tile_operands(kinds: dict[str, str]) -> frozenset[str]:
    """The operands read element for element where the output is stored (kind `tile`), the only
    ones that may be `out=` itself."""
    return frozenset(name for name, kind in kinds.items() if kind == "tile")


def check_out_per_call(a, b, out: torch.Tensor, operands: dict, tiles: frozenset[str]) -> None:
    """What `out=` must satisfy on every launch, cached ones too (a plan's key holds its layout,
    not its memory or mode): writable here, and apart from what the tiles still read."""
    _check_out_writable(out)
    _check_out_overlap(a, b, out, operands, tiles)


def _check_out_overlap(a, b, out: torch.Tensor, operands: dict, tiles: frozenset[str]) -> None:
    """`out=` may not share memory with a GEMM's A or B: other tiles still read them after this
    one's output is stored. Only what a tile reads at its own elements before it stores may be
    `out=` itself, element for element: a map's input (an in-place map) or a tile operand (an
    in-place residual add, `tiles`); no other operand may overlap it (a `head` table is read at
    column j mod H, a Partials' parts down a whole column: other tiles' values). Meta tensors
    hold no memory (each one's data_ptr is 0): nothing to share."""
    o0, o1 = _byte_range(out)
    if o0 == o1 or out.device.type == "meta":
        return
    pieces = a.pieces if isinstance(a, Concat) else (a,)
    in_place_map = b is None and len(pieces) == 1
    for x in pieces:
        if _overlaps(x, o0, o1) and not (in_place_map and _same(x, out)):
            raise _shared_with("A" if b is not None else "the input", in_place_map)
    if b is not None and _overlaps(b, o0, o1):
        raise _shared_with("B", False)
    for name, value in operands.items():
        x = value.parts if isinstance(value, Partials) else value
        in_place = name in tiles and not isinstance(value, Partials) and _same(x, out)
        if isinstance(x, torch.Tensor) and _overlaps(x, o0, o1) and not in_place:
            raise _shared_with(f"operand {name!r}", True)


def _shared_with(name: str, may_be_out: bool) -> LaunchError:
    how = ("only a map's input or a tile operand may be out= itself, element for element"
           if may_be_out else "other tiles still read it after a tile's output is stored")
    return LaunchError(f"out= shares memory with {name}: {how}; write to a separate tensor")


def _overlaps(x: torch.Tensor, start: int, end: int) -> bool:
    x0, x1 = _byte_range(x)
    return x0 < end and start < x1


def _same(x: torch.Tensor, y: torch.Tensor) -> bool:
    """x and y are the same elements (an element of another size at the same place is not)."""
    return (x.data_ptr() == y.data_ptr() and x.shape == y.shape and x.stride() == y.stride()
            and x.element_size() == y.element_size())


def _byte_range(x: torch.Tensor) -> tuple[int, int]:
    """[first, last + 1) bytes of x's elements; empty for an empty tensor."""
    start, last = x.data_ptr(), 0
    for size, stride in zip(x.shape, x.stride(), strict=True):
        if size == 0:
            return start, start
        last += (size - 1) * stride
    return start, start + (last + 1) * x.element_size()
