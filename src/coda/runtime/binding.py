"""Binding a launch: check A, B, the operands and the options, and settle every output's shape.

Everything a user can get wrong at a launch is caught here with a `LaunchError` that names the
operand and says what was expected, before any backend sees the tensors.
"""

from __future__ import annotations

import difflib
import numbers
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from ..errors import LaunchError
from ..passes import infer_kinds
from ..passes.widths import columns
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


@dataclass
class Launch:
    """One bound launch: the program, the GEMM operands and sizes (`b` None for a map, whose
    `input` is `a`), and the epilogue's operands."""

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
         outputs=None, dtypes=None) -> Launch:
    """Validate a launch of `program` and resolve operand kinds and output shapes.

    With `b` None the launch is a map: `input` is `a` itself ([M, N]), no GEMM runs. `outputs`
    names the outputs to produce (default: all); the others are neither computed nor written.
    `dtypes` maps output names to the dtype each is stored in (default: tiles in `out_dtype`,
    reductions in float32)."""
    if b is None:
        _check_matrix("X", a)
        (m, n), k = a.shape, 0
    else:
        _check_matrix("A", a)
        _check_matrix("B", b)
        if b.device != a.device:
            raise LaunchError(f"B is on {b.device} but A is on {a.device}")
        (m, k), (k2, n) = a.shape, b.shape
        if k != k2:
            raise LaunchError(f"A is [M, K] = {list(a.shape)} and B is [K, N] = {list(b.shape)}: "
                              f"their K differ ({k} vs {k2})")
    epi = program.ir
    if program.has_unpack and n % 2:
        raise LaunchError(f"the program unpacks column pairs, so N must be even; got N = {n}")
    for width in program.rope_domains:
        if columns(width, n) % 2:
            raise LaunchError(f"rope rotates column pairs: the rotated value needs an even number "
                              f"of columns; got N = {n}")
    values = _operand_values(epi, operands, a.device)
    kinds = infer_kinds(epi, program.widths, m, n, values)
    check_per_call(program.probabilities, values, seed)
    if out_dtype is None:
        out_dtype = out.dtype if isinstance(out, torch.Tensor) else a.dtype
    specs = _stored_as(_output_specs(program, m, n, out_dtype), dtypes)
    if out is not None:
        _check_out(out, specs[0], a.device)
    elif epi.accumulates:
        raise LaunchError("the program accumulates into `output` (it reads the prior output, as "
                          "`output += ...` does): pass the tensor to accumulate into as out=")
    if epi.uses_dropout and seed is None:
        raise LaunchError("the program uses dropout: pass an integer seed= (got None)")
    seed = seed_word(seed)
    selected = _select(specs, outputs)
    if epi.accumulates and selected[0].name != "output":
        raise LaunchError("the program accumulates into `output`: outputs= must include 'output'")
    return Launch(program, a, b, m, n, k, kinds, values, selected, out, seed)


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


def _select(specs: tuple[OutputSpec, ...], names) -> tuple[OutputSpec, ...]:
    if names is None:
        return specs
    if isinstance(names, str) or not all(isinstance(n, str) for n in names):
        raise LaunchError(f"outputs= takes a list of output names, got {names!r}")
    known = [s.name for s in specs]
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise LaunchError(f"outputs=: {unknown[0] if unknown else 'no outputs'!r} is not an output "
                          f"of the program; it has: {', '.join(known)}")
    return tuple(s for s in specs if s.name in names)


def probability_operands(epi) -> tuple[str, ...]:
    """The operands that some dropout takes as its probability."""
    return tuple(dict.fromkeys(node.args[1].arg for node in epi.nodes()
                               if node.op == "dropout" and node.args[1].op == "operand"))


def check_per_call(probabilities: tuple[str, ...], values: dict, seed) -> None:
    """What a launch must check even when its plan is cached (these values are not in the plan's
    key): the seed is an integer, and a dropout probability bound as a plain number lies in
    [0, 1] (tensors are not read back here: that would synchronize with the device)."""
    if seed is not None and (not isinstance(seed, numbers.Integral) or isinstance(seed, bool)):
        raise LaunchError(f"seed= must be an integer, got {seed!r}")
    for name in probabilities:
        p = values.get(name)
        if isinstance(p, numbers.Real) and not 0.0 <= p <= 1.0:
            raise LaunchError(f"operand {name!r} is a dropout probability: expected a number in "
                              f"[0, 1], got {p!r}")


def _check_matrix(name: str, x) -> None:
    if not isinstance(x, torch.Tensor):
        raise LaunchError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() != 2:
        raise LaunchError(f"{name} must be 2-D ([M, K] for A, [K, N] for B), got shape "
                          f"{list(x.shape)}")
    if x.dtype not in FLOAT_DTYPES:
        raise LaunchError(f"{name} has dtype {x.dtype}; expected one of float16, bfloat16, "
                          f"float32, float64")


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
    if tuple(out.shape) != spec.shape:
        raise LaunchError(f"out=: expected shape {list(spec.shape)}, got {list(out.shape)}")
    if out.dtype != spec.dtype:
        raise LaunchError(f"out=: expected dtype {spec.dtype} (the output dtype), got {out.dtype}")
    if out.device != device:
        raise LaunchError(f"out= is on {out.device} but A is on {device}")
