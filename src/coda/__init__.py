"""CODA: GEMM + epilogue programs for the memory-bound operators of Transformer training.

    prog = coda.compile("EPILOGUE { output = gelu(input + bias); }")
    outs = prog(a, b, bias=bias)            # {"output": gelu(a @ b + bias)}

    @coda.epilogue
    def bias_gelu(acc, bias: coda.col):
        return coda.gelu(acc + bias)
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from .dsl.lower import lower
from .dsl.parser import parse
from .dsl.tracer import FUNCTIONS, locate, trace
from .errors import CodaError, DslError, LaunchError, UnknownNameError
from .primitives import unknown_function_hint
from .runtime.binding import Concat
from .runtime.partials import Partials
from .runtime.program import Program

__version__ = "0.1.0"

#: Operand kinds, for annotations in `@coda.epilogue` functions (`bias: coda.col`).
tile, row, col, scalar, head = "tile", "row", "col", "scalar", "head"

globals().update(FUNCTIONS)  # coda.gelu, coda.row_sum, coda.unpack, ... (from the primitive table)


def compile(source: str) -> Program:  # noqa: A001 - the contract's name
    """Parse and check DSL text now; kernels are built at the first launch."""
    if not isinstance(source, str):
        raise CodaError(f"coda.compile takes the program text, got {type(source).__name__}")
    try:
        return Program(lower(parse(source), source))
    except RecursionError:
        raise DslError(_TOO_DEEP) from None
    except DslError as err:  # from the passes: show the offending line too
        if err.source is not None:
            raise
        raise err.with_source(source) from None


def epilogue(fn: Callable) -> Program:
    """Decorator: trace a Python function into the same IR as the text DSL."""
    try:
        return Program(trace(fn))
    except RecursionError:
        raise DslError(_TOO_DEEP) from None
    except DslError as err:  # from the passes: locate it in the function's source
        raise locate(err, fn) from None


_TOO_DEEP = ("the program nests expressions too deeply for the compiler (hundreds of levels); "
             "split long expressions into several statements")


__all__ = ["CodaError", "Concat", "DslError", "LaunchError", "Program", "Partials", "col", "compile",
           "epilogue", "head", "row", "scalar", "tile", *FUNCTIONS]


def __getattr__(name: str) -> object:
    """`coda.ops` and `coda.nn`, `coda.patch` (HuggingFace models) and `coda.capture_step` (a
    training step as a CUDA graph, docs/integrations.md), imported on first use."""
    if name in ("ops", "nn"):
        return importlib.import_module(f".{name}", __name__)
    if name == "patch":
        from .integrations.hf import patch

        return patch
    if name == "capture_step":
        from .integrations.cuda_graphs import capture_step

        return capture_step
    if name.startswith("_"):
        raise AttributeError(f"module 'coda' has no attribute {name!r}")
    raise UnknownNameError(f"module 'coda' has no attribute {name!r}{unknown_function_hint(name)}")
