"""The `coda` command line: run, check, explain and demo epilogue programs.

    coda run FILE.epi [--shape M,N,K] [--dtype bfloat16] [--seed S] [--backend auto] [--repeat R]
    coda check FILE.epi [--shape M,N,K] [--dtype float16] [--seed S] [--backend all]
    coda explain FILE.epi [--shape M,N,K]
    coda demo
    coda train [--preset tiny] [--steps N] [--compare] ...   (see coda/train.py)

`run` launches a program on random inputs and summarizes its outputs (on a GPU: its time beside
the plain GEMM's); `check` runs a program on random inputs on every available backend and compares
each output with a float64 reference run; `explain` prints what the compiler made of a program;
`demo` checks every example program shipped with the package at two shapes and three dtypes.

Exit codes: 0 when everything passed, 1 when a comparison failed, 2 for a bad program, a bad
launch or a bad command line (the message goes to stderr, never a traceback), 130 after Ctrl-C.

Nothing here imports Triton at module level: on a machine without CUDA, `demo`, `explain --shape`
and `check` or `run` with `--backend triton` switch on the Triton interpreter (TRITON_INTERPRET=1) unless the
variable is already set, and that must happen before Triton is imported.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import torch

from . import train
from .errors import CodaError
from .passes.widths import columns
from .runtime.program import Program, interpreter_enabled

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
#: Columns of the rope tables (`head` operands) that `check` makes up.
HEAD_COLUMNS = 4
#: The value given to every scalar operand without a default (a dropout probability, say).
SCALAR_VALUE = 0.1
#: Shapes (M, N, K) of `coda demo`: an odd one (N stays even for unpack and rope) and a small
#: multi-tile one.
DEMO_SHAPES = ((67, 50, 33), (96, 160, 64))
DEFAULT_SHAPE = (67, 50, 33)


def tolerance(dtype: torch.dtype, backend: str) -> float:
    """The largest acceptable ||out - ref|| / ||ref|| against a float64 reference.

    float32: the reference computes in float32 (error ~ K * 2**-24); Triton's `tl.dot` takes
    float32 inputs on NVIDIA GPUs at torch's float32 matmul precision (kernel.dot_precision): under
    "high", TF32 (inputs cut to a 10-bit mantissa), measured on an H200 at 4e-4 to 8e-4 for one
    GEMM value per output and 1.6e-3 for swiglu (a product of two), hence 5e-3 (3xTF32, the
    default, is far inside it). float16 and bfloat16: the inputs are the same low-precision values in both
    runs, so the error is the rounding of the stored output (2**-11 and 2**-8 relative per
    element; measured 2e-4 and 1.7e-3) with headroom for the GEMM's float32 accumulation.
    """
    if dtype == torch.float32:
        return 1e-5 if backend == "reference" else 5e-3
    return {torch.float16: 2e-3, torch.bfloat16: 2e-2}[dtype]


class BackendUnavailable(Exception):
    """The Triton backend is not installed or not implemented on this machine."""


@dataclass
class Row:
    """One compared output (or a skipped / failed backend run) of `check`."""

    backend: str
    output: str
    shape: str
    error: float | None
    tol: float | None
    status: str  # "PASS", "FAIL" or "SKIP"
    note: str = ""


# ------------------------------------------------------------------------------------------------
# Loading programs and making inputs


def load_program(path: str | Path) -> Program:
    """Read and compile an .epi file, or the program on standard input for "-" (a program that a
    generator writes need not be saved first). CodaError for a bad program or text that is not
    UTF-8, OSError for a bad path. A Python file's error says that the DSL is wanted: alone, the
    DSL's message about its first line (a docstring: "there are no strings") misleads."""
    from . import compile as coda_compile

    try:
        if str(path) == "-" and sys.stdin is None:   # started with standard input closed
            raise CodaError("standard input is closed; give the program's file instead")
        raw = sys.stdin.buffer.read() if str(path) == "-" else Path(path).read_bytes()
        source = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise CodaError(f"not UTF-8 text: byte {err.object[err.start]:#04x} at offset {err.start}") from None
    try:
        return coda_compile(source)
    except CodaError as err:
        if Path(path).suffix != ".py":
            raise
        raise CodaError(f"{err}\n(a Python file: `coda` reads programs in the DSL, .epi files; run "
                        f"@coda.epilogue functions from Python)") from None


def parse_shape(text: str) -> tuple[int, int, int]:
    """'M,N,K' (or 'MxNxK') -> (M, N, K), for argparse. Sizes must fit torch's int64 (a larger
    one was a TypeError traceback from torch.randn; a smaller one that does not fit in memory is
    an allocation error, make_inputs)."""
    parts = text.replace("x", ",").replace("X", ",").split(",")
    try:
        dims = tuple(int(p) for p in parts)
    except ValueError:
        dims = ()
    if len(dims) != 3 or min(dims) < 1 or max(dims) >= 2**63:
        raise argparse.ArgumentTypeError(f"expected M,N,K (three positive integers below 2**63), "
                                         f"got {text!r}")
    return dims


def operand_kind(prog: Program, name: str) -> str:
    """The declared kind of an operand, or the kind its usage implies.

    Kinds that usage decides (rope tables, dropout probabilities) are filled in by the compiler;
    an undeclared operand that meets both column domains (before and after `unpack`) can only be
    a row or a scalar, so it gets a row; any other undeclared operand gets a tile.
    """
    param = prog.ir.params[name]
    if param.kind is not None:
        return param.kind
    if param.default is not None:
        return "scalar"
    return "row" if len(prog.widths.operands.get(name, ())) > 1 else "tile"


def make_inputs(prog: Program, shape: tuple[int, int, int], dtype: torch.dtype, seed: int,
                device: torch.device) -> tuple[torch.Tensor, torch.Tensor, dict, torch.Tensor | None]:
    """Random A [M, K], B [K, N], one value per operand and, for `output +=`, an out= tensor.

    B is scaled by 1/sqrt(K) so that the GEMM result is of order one in every dtype.
    Operands in the unpacked domain are [M, N/2] tiles and [N/2] columns.
    """
    m, n, k = shape
    gen = torch.Generator().manual_seed(seed)

    def randn(*size: int, scale: float = 1.0) -> torch.Tensor:
        try:
            return (torch.randn(*size, generator=gen, dtype=torch.float64) * scale).to(device, dtype)
        except (RuntimeError, MemoryError) as err:   # torch's allocation failures
            first = (str(err).strip().splitlines() or [""])[0]
            raise CodaError(f"{shape_flag(shape)}: cannot allocate a {list(size)} input ({first})") from None

    a, b = randn(m, k), randn(k, n, scale=k ** -0.5)
    operands: dict[str, object] = {}
    for name, param in prog.ir.params.items():
        if param.default is not None:
            continue  # a traced function's numeric default: the program's own choice
        kind = operand_kind(prog, name)
        cols = n // 2 if "half" in prog.widths.operands.get(name, ()) else n
        if kind == "scalar":
            operands[name] = SCALAR_VALUE
        elif kind == "row":  # a per-row scale such as rstd: positive
            operands[name] = (0.5 + torch.rand(m, generator=gen, dtype=torch.float64)).to(device, dtype)
        elif kind == "col":
            operands[name] = randn(cols)
        elif kind == "head":  # cos / sin tables
            angles = torch.rand(m, HEAD_COLUMNS, generator=gen, dtype=torch.float64) * 2 * math.pi
            table = torch.cos(angles) if "sin" not in name else torch.sin(angles)
            operands[name] = table.to(device, dtype)
        else:
            operands[name] = randn(m, cols)
    out = None
    if prog.ir.accumulates:
        out = randn(m, columns(prog.widths.outputs["output"], n))
    return a, b, operands, out


def shape_flag(shape: tuple[int, int, int]) -> str:
    """`--shape M,N,K`, to name in an error."""
    return "--shape " + ",".join(map(str, shape))


def upcast(value: object) -> object:
    """A tensor in float64 (numbers stay as they are)."""
    return value.to(torch.float64) if isinstance(value, torch.Tensor) else value


# ------------------------------------------------------------------------------------------------
# Backends and comparison


def available_backends() -> list[str]:
    """The reference always; Triton on CUDA machines or with TRITON_INTERPRET=1."""
    backends = ["reference"]
    if torch.cuda.is_available() or interpreter_enabled():
        backends.append("triton")
    return backends


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref|| in float64 over the finite elements (the absolute norm when ref is
    zero there); inf where a NaN or an infinity of one is not the same in the other."""
    out64, ref64 = out.detach().to(torch.float64), ref.detach().to(torch.float64)
    finite = torch.isfinite(ref64)
    same_special = (out64 == ref64) | (out64.isnan() & ref64.isnan())
    if not (torch.isfinite(out64) == finite).all() or not same_special[~finite].all():
        return math.inf
    out64, ref64 = out64[finite], ref64[finite]
    diff = torch.linalg.vector_norm(out64 - ref64).item()
    scale = torch.linalg.vector_norm(ref64).item()
    return diff / scale if scale > 0 else diff


def skip_reason(backend: str, dtype: torch.dtype) -> str | None:
    """Why a backend cannot run this dtype here, or None."""
    if backend == "triton" and dtype == torch.bfloat16 and not torch.cuda.is_available():
        return "bfloat16 is not supported by the Triton interpreter"
    return None


def run_backend(prog: Program, backend: str, inputs: tuple, seed: int) -> dict[str, torch.Tensor]:
    """One launch; a missing Triton backend raises BackendUnavailable."""
    a, b, operands, out = inputs
    try:
        return prog(a, b, backend=backend, seed=seed,
                    out=None if out is None else out.clone(), **operands)
    except (ImportError, NotImplementedError) as err:
        if backend == "triton":
            raise BackendUnavailable(f"{type(err).__name__}: {err}") from err
        raise


def check_program(prog: Program, shape: tuple[int, int, int], dtype: torch.dtype, seed: int,
                  backends: Sequence[str]) -> list[Row]:
    """Run `prog` on every backend and compare every output with a float64 reference run.

    A CodaError (a launch that does not fit the program, or tensors that do not fit in memory)
    propagates; a backend that crashes gives a FAIL row with the exception's message;
    BackendUnavailable propagates.
    """
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    with train.memory_of(device, shape_flag(shape)):   # tensors that do not fit: exit 2
        inputs = make_inputs(prog, shape, dtype, seed, device)
        a, b, operands, out = inputs
        ref = prog.reference(upcast(a), upcast(b), seed=seed, out=upcast(out),
                             **{name: upcast(v) for name, v in operands.items()})
        rows: list[Row] = []
        for backend in backends:
            reason = skip_reason(backend, dtype)
            if reason:
                rows.append(Row(backend, "*", "", None, None, "SKIP", reason))
                continue
            try:
                with train.memory_of(device, shape_flag(shape)):   # (before `except Exception`)
                    outs = run_backend(prog, backend, inputs, seed)
            except (BackendUnavailable, CodaError):
                raise
            except Exception as err:  # a backend bug: report it as a failure, not a traceback
                first_line = (str(err).strip().splitlines() or [""])[0]
                rows.append(Row(backend, "*", "", None, None, "FAIL", f"{type(err).__name__}: {first_line}"))
                continue
            tol = tolerance(dtype, backend)
            for name, expected in ref.items():
                got = outs.get(name)
                if got is None or got.shape != expected.shape:
                    note = "missing" if got is None else f"shape {list(got.shape)}"
                    rows.append(Row(backend, name, str(list(expected.shape)), None, tol, "FAIL", note))
                    continue
                err = relative_error(got, expected)
                rows.append(Row(backend, name, str(list(got.shape)), err, tol,
                                "PASS" if err <= tol else "FAIL"))
    return rows


# ------------------------------------------------------------------------------------------------
# Printing


def format_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain left-aligned text table."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows, strict=True)]
    lines = ["  ".join(str(cell).ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
             for line in (headers, [("-" * w) for w in widths], *rows)]
    return "\n".join(lines)


def row_cells(row: Row) -> list[str]:
    error = "-" if row.error is None else f"{row.error:.2e}"
    tol = "-" if row.tol is None else f"{row.tol:.0e}"
    status = f"{row.status} ({row.note})" if row.note else row.status
    return [row.backend, row.output, row.shape, error, tol, status]


ROW_HEADERS = ("backend", "output", "shape", "rel. error", "tolerance", "status")


def note(message: str) -> None:
    print(f"note: {message}")


# ------------------------------------------------------------------------------------------------
# Commands


def cmd_check(args: argparse.Namespace) -> int:
    """`coda check`: compare a program's outputs on every backend with a float64 reference."""
    prog = load_program(args.file)
    dtype = DTYPES[args.dtype]
    backends = select_backends(args.backend)
    reason = skip_reason(args.backend, dtype)
    if reason:   # the one backend asked for: "PASS: 0 passed" would say nothing was wrong
        raise CodaError(f"--backend {args.backend} --dtype {args.dtype}: {reason}")
    m, n, k = args.shape
    print(f"{prog!r}")
    print(f"M={m} N={n} K={k}, {args.dtype}, seed {args.seed}; reference: float64 on the same inputs")
    try:
        rows = check_program(prog, args.shape, dtype, args.seed, backends)
    except BackendUnavailable as err:
        if args.backend == "triton":
            raise CodaError(f"the Triton backend is not available: {err}") from None
        note(f"the Triton backend is not available ({err}); checking the reference only")
        rows = check_program(prog, args.shape, dtype, args.seed, ["reference"])
    print(format_table(ROW_HEADERS, [row_cells(r) for r in rows]))
    failed = [r for r in rows if r.status == "FAIL"]
    passed = sum(r.status == "PASS" for r in rows)
    verdict = "FAIL" if failed else "PASS"
    print(f"{verdict}: {passed} passed, {len(failed)} failed")
    return 1 if failed else 0


def select_backends(choice: str) -> list[str]:
    """The backends `--backend` names: `all` means every available one."""
    if choice == "all":
        return available_backends()
    if choice == "triton" and "triton" not in available_backends():
        raise CodaError("the Triton backend needs a CUDA GPU, or TRITON_INTERPRET=1 to run its "
                        "kernels on the CPU")
    return [choice]


def cmd_explain(args: argparse.Namespace) -> int:
    """`coda explain`: the IR after passes and the outputs; with --shape, operand kinds and the
    generated kernel (the IR part only where the Triton backend is unavailable)."""
    prog = load_program(args.file)
    if args.shape is None:
        print(prog.explain())
        return 0
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    a, b, operands, out = make_inputs(prog, args.shape, torch.float32, 0, device)
    options = {"out": out} if out is not None else {}
    if prog.ir.uses_dropout:
        options["seed"] = 0
    launch = prog.bind(a, b, **options, **operands)  # a launch that does not fit: exit 2
    try:
        print(prog.explain(a, b, **options, **operands))
    except CodaError:
        raise
    except Exception as err:  # no Triton backend here, or it cannot build this kernel
        print(prog.explain())
        print("\n# operand kinds")
        print("\n".join(f"  {name}: {kind}" for name, kind in launch.kinds.items()))
        first_line = (str(err).strip().splitlines() or [""])[0]
        note(f"the generated kernel is not shown: the Triton backend is not available "
             f"({type(err).__name__}: {first_line})")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    """`coda run`: launch a program on random inputs and summarize its outputs; on a GPU also
    time the launch against `torch.matmul`'s plain GEMM of the same operands (cuBLAS)."""
    prog = load_program(args.file)
    dtype = DTYPES[args.dtype]
    reason = skip_reason(args.backend, dtype)
    if reason is not None:
        raise CodaError(f"--backend {args.backend} --dtype {args.dtype}: {reason}")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    a, b, operands, out = make_inputs(prog, args.shape, dtype, args.seed, device)
    m, n, k = args.shape

    def launch() -> dict[str, torch.Tensor]:   # (`output +=`: each launch adds into `out` again)
        return prog(a, b, backend=args.backend, seed=args.seed, out=out, **operands)

    with train.memory_of(device, shape_flag(args.shape)):   # outputs that do not fit: exit 2
        outs = launch()
        rows = [[name, str(list(t.shape)), str(t.dtype).removeprefix("torch."), *summary(t)]
                for name, t in outs.items()]
    print(f"{prog!r}")
    print(f"M={m} N={n} K={k}, {args.dtype}, seed {args.seed}, on {device.type}")
    print(format_table(("output", "shape", "dtype", "mean", "abs max", "not finite"), rows))
    if device.type != "cuda":
        note("timings need a CUDA GPU")
        return 0
    fused, plain = median_ms(launch, args.repeat), median_ms(lambda: torch.matmul(a, b), args.repeat)
    print(f"time: {1e3 * fused:.1f} us a launch (median of {args.repeat}); torch.matmul's plain GEMM "
          f"{1e3 * plain:.1f} us: {fused / plain:.2f}x its time")
    return 0


def summary(t: torch.Tensor) -> list[str]:
    """The mean and the largest magnitude of a tensor's finite elements, and how many are not
    finite."""
    t64 = t.detach().to(torch.float64)
    finite = t64[torch.isfinite(t64)]
    if not finite.numel():
        return ["-", "-", str(t.numel())]
    return [f"{finite.mean().item():.4g}", f"{finite.abs().max().item():.4g}",
            str(t.numel() - finite.numel())]


def median_ms(fn, repeat: int) -> float:
    """The median of `repeat` timings of `fn()` on the current CUDA stream, in ms, after 3
    warm-up calls (CUDA events, each call synchronized)."""
    for _ in range(3):
        fn()
    times = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def example_files() -> list[Path]:
    """The .epi programs shipped in the package's examples folder, sorted by name."""
    folder = resources.files("coda") / "examples"
    return sorted((Path(str(f)) for f in folder.iterdir() if f.name.endswith(".epi")),
                  key=lambda p: p.name)


def cmd_demo(args: argparse.Namespace) -> int:
    """`coda demo`: check every example program at two shapes and each dtype, on every backend."""
    backends = available_backends()
    describe_backends(backends)
    results: list[tuple[str, Row]] = []  # (program, row)
    for path in example_files():
        prog = load_program(path)
        print(f"\n{path.name}: {prog!r}")
        for shape in DEMO_SHAPES:
            for dtype_name in dict.fromkeys(args.dtypes):   # `--dtypes float16 float16`: once
                try:
                    rows = check_program(prog, shape, DTYPES[dtype_name], args.seed, backends)
                except BackendUnavailable as err:
                    note(f"the Triton backend is not available ({err}); continuing with the "
                         f"reference backend only")
                    backends = ["reference"]
                    rows = check_program(prog, shape, DTYPES[dtype_name], args.seed, backends)
                print("  " + summarize("x".join(map(str, shape)), dtype_name, rows))
                results += [(path.stem, r) for r in rows]
    print("\n" + format_table(("program", "backend", "passed", "failed", "skipped", "worst err/tol"),
                              demo_summary(results)))
    failed = [(name, r) for name, r in results if r.status == "FAIL"]
    if failed:
        print("\nfailures:")
        print(format_table(("program", *ROW_HEADERS), [[name, *row_cells(r)] for name, r in failed]))
    passed = sum(r.status == "PASS" for _, r in results)
    skipped = sum(r.status == "SKIP" for _, r in results)
    print(f"\ndemo {'FAILED' if failed else 'passed'}: {passed} outputs passed, {len(failed)} failed, "
          f"{skipped} runs skipped (backends: {', '.join(backends)})")
    return 1 if failed else 0


def demo_summary(results: Sequence[tuple[str, Row]]) -> list[list[str]]:
    """One table row per (program, backend): counts and the worst error as a fraction of its
    tolerance (below 1 passes)."""
    table = []
    for program, backend in dict.fromkeys((name, r.backend) for name, r in results):
        rows = [r for name, r in results if (name, r.backend) == (program, backend)]
        ratios = [r.error / r.tol for r in rows if r.error is not None and r.tol]
        counts = [sum(r.status == s for r in rows) for s in ("PASS", "FAIL", "SKIP")]
        table.append([program, backend, *map(str, counts), f"{max(ratios):.2f}" if ratios else "-"])
    return table


def summarize(shape: str, dtype: str, rows: Sequence[Row]) -> str:
    """One line per (shape, dtype): per backend, PASS/FAIL and the worst error vs tolerance."""
    parts = []
    for backend in dict.fromkeys(r.backend for r in rows):
        mine = [r for r in rows if r.backend == backend]
        if all(r.status == "SKIP" for r in mine):
            parts.append(f"{backend}: SKIP ({mine[0].note})")
            continue
        status = "FAIL" if any(r.status == "FAIL" for r in mine) else "PASS"
        worst = max(mine, key=lambda r: -1.0 if r.error is None else r.error / r.tol)
        detail = f"{worst.error:.1e} <= {worst.tol:.0e}" if worst.error is not None else worst.note
        if status == "FAIL" and worst.error is not None and worst.error > worst.tol:
            detail = f"{worst.output} {worst.error:.1e} > {worst.tol:.0e}"
        parts.append(f"{backend}: {status} {detail}".rstrip())
    return f"{shape:>11}  {dtype:<9} " + "   ".join(parts)


def describe_backends(backends: Sequence[str]) -> None:
    """Say which backends the demo runs and why."""
    if torch.cuda.is_available():
        note(f"CUDA GPU found ({torch.cuda.get_device_name()}): running reference and Triton")
    elif "triton" in backends:
        note("no CUDA GPU: running the generated Triton kernels in the Triton interpreter "
             "(TRITON_INTERPRET=1); bfloat16 is skipped there")
    else:
        note("no CUDA GPU and TRITON_INTERPRET is not 1: running the reference backend only")


def prepare_interpreter() -> None:
    """On a machine without CUDA, run Triton kernels in the interpreter unless the user chose
    (TRITON_INTERPRET already set, to 0 or 1). Used by `demo`, `explain --shape` and `check` or
    `run` with `--backend triton`; without it they leave the choice to the environment.

    Must run before anything imports triton (the interpreter is picked when kernels are made).
    """
    if "TRITON_INTERPRET" not in os.environ and not torch.cuda.is_available():
        os.environ["TRITON_INTERPRET"] = "1"


# ------------------------------------------------------------------------------------------------
# Entry point


def add_launch_arguments(command: argparse.ArgumentParser) -> None:
    """The program file and its random launch: `FILE --shape M,N,K --dtype D --seed S`."""
    command.add_argument("file", help="an epilogue program (.epi; - reads standard input)")
    command.add_argument("--shape", type=parse_shape, default=DEFAULT_SHAPE, metavar="M,N,K",
                         help="GEMM sizes (default: %(default)s)")
    command.add_argument("--dtype", choices=list(DTYPES), default="float32")
    command.add_argument("--seed", type=train.parse_seed, default=0, help="seed of the inputs and of dropout")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="coda", description="GEMM + epilogue programs: run, "
                                     "check, explain and demo epilogue (.epi) files.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    check = commands.add_parser("check", help="run a program on every backend and compare "
                                "with a float64 reference")
    add_launch_arguments(check)
    check.add_argument("--backend", choices=("all", "reference", "triton"), default="all",
                       help="backends to check (default: every available one)")
    check.set_defaults(func=cmd_check)

    run = commands.add_parser("run", help="launch a program on random inputs: its outputs, and on a "
                              "GPU its time against the plain GEMM")
    add_launch_arguments(run)
    run.add_argument("--backend", choices=("auto", "reference", "triton"), default="auto",
                     help="auto: Triton on a GPU (or with TRITON_INTERPRET=1), else the reference")
    run.add_argument("--repeat", type=train.positive(int), default=20,
                     help="timed launches on a GPU (default 20)")
    run.set_defaults(func=cmd_run)

    explain = commands.add_parser("explain", help="print the IR (and, with --shape, the kernel)")
    explain.add_argument("file", help="an epilogue program (.epi; - reads standard input)")
    explain.add_argument("--shape", type=parse_shape, default=None, metavar="M,N,K",
                         help="bind example inputs of this size and show the generated kernel")
    explain.set_defaults(func=cmd_explain)

    demo = commands.add_parser("demo", help="check every example program on every backend")
    demo.add_argument("--dtypes", nargs="+", choices=list(DTYPES), default=list(DTYPES),
                      metavar="DTYPE", help="dtypes to run (default: all three)")
    demo.add_argument("--seed", type=train.parse_seed, default=0)
    demo.set_defaults(func=cmd_demo)

    training = commands.add_parser("train", help="train a small GPT on the bundled corpus with CODA's "
                                   "fused operators (coda.train)")
    train.add_arguments(training)
    training.set_defaults(func=train.cmd_train)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (0 pass, 1 fail, 2 bad program or usage)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # --help, or a usage error argparse already printed
        return int(exit_.code or 0)
    if args.command == "demo" or (args.command == "explain" and args.shape is not None) or (
            args.command in ("check", "run") and args.backend == "triton"):
        prepare_interpreter()
    if args.command == "demo":  # tiny shapes: the heuristic config, no time spent tuning
        os.environ.setdefault("CODA_AUTOTUNE", "0")
    try:
        return args.func(args)
    except CodaError as err:
        where = f"{args.file}: " if getattr(args, "file", None) else ""
        print(f"coda: error: {where}{err}", file=sys.stderr)
        return 2
    except BrokenPipeError:   # `coda demo | head`: the reader left; nothing to report
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())   # (Python's exit flushes)
        return 1
    except OSError as err:
        print(f"coda: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:   # Ctrl-C: a line, not a traceback
        print("coda: interrupted", file=sys.stderr)
        return train.INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
