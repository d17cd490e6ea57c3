"""The Triton backend of one Program: generate, cache, configure and launch its kernels.

Source is generated once per (operand signature, mainloop) and imported from a file in the cache
directory (Triton reads kernel source from files); Triton caches the compiled binaries per dtype
and configuration in memory and on disk. The first launch of a shape returns a `Plan`, which
`Program` keeps: a later launch of the same layout is allocate outputs, one direct kernel launch,
and, with reduction outputs, one direct launch of the small kernel that finishes them all
(codegen/finish.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib.util
import math
import os
import re
import tempfile
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from triton.runtime.errors import OutOfResources

from ..errors import LaunchError
from ..ir import as_float, format_epilogue
from ..passes.widths import DOUBLE
from ..runtime.binding import A_COL_SUMS, MAX_PIECES, Concat, Launch, tile_operands
from ..runtime.partials import Partials
from ..runtime.program import Program, tf32_matmuls
from . import tuning
from .epilogue import (
    Signature,
    descriptor_prologue,
    epilogue_args,
    generate_epilogue,
    half_width,
    kernel_params,
    pingpong_parts,
)
from .finish import generate_finish, merge_tile
from .mainloops import HEADER, MAINLOOPS, ZERO_PAST_EDGES
from .tuning import Config

_TRITON_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_thread = threading.local()   # Triton keeps its allocator per thread (a ContextVar)
#: the stream-K runs' partial tiles and flags among a Plan's partial buffers
STREAM_K_PARTIALS = "stream-K runs"
KEPT_PARTIAL_BYTES = 16 << 20  # a plan keeps its reductions' partial buffers up to this size


@dataclass(frozen=True)
class Kernel:
    variant: str
    source: str
    fn: Callable
    finish: Callable | None = None   # the kernel that finishes the launch's reductions


class TritonProgram:
    """Kernels of one Program, keyed by operand signature and mainloop variant."""

    def __init__(self, program: Program):
        self.program = program
        self.fingerprint = hashlib.sha256(format_epilogue(program.ir).encode()).hexdigest()[:16]
        self._kernels: dict[tuple[Signature, str], Kernel] = {}
        self._configs: dict[tuple, Config] = {}
        self._lock = threading.Lock()
        # The ping-pong kernel stages outputs in shared memory for TMA stores and never reads
        # them back from global memory: a program that reads its prior output (`output += x`)
        # runs in the Triton kernel. (Prefetching the prior tile would not fit for a float32
        # accumulator: two warpgroups' 128x128 fp32 tiles are 128 KiB next to the 128 KiB ring.)
        self.pingpong = not program.ir.accumulates
        self.packs = DOUBLE in program.widths.outputs.values()   # stores a pack(...) [M, 2N]

    # public -----------------------------------------------------------------------------------
    def launch(self, launch: Launch, config: Config | None = None) -> dict[str, torch.Tensor]:
        """Run the bound launch; `config` overrides tuning (tests, benchmarks)."""
        return self.start(launch, config)[1]

    def start(self, launch: Launch, config: Config | None = None
              ) -> tuple[Plan, dict[str, torch.Tensor]]:
        """Run a launch for the first time and return its plan (for cached relaunches) and
        outputs. A configuration that does not fit the GPU (shared memory) is replaced by the
        next candidate; a ping-pong one first by itself with its warpgroups sharing one set of
        tile-operand buffers (where it has tile operands), then with shallower rings, down to 3
        deep (the epilogue's tile operands are staged beside the ring: a SwiGLU gradient at
        K = 768 fits either way, 220.6 and 241.9 us on an H100 against 337.8 in the first
        candidate, the Triton kernel's 128x256 tiles; benchmarks/results/session56)."""
        check_dtypes(launch)
        _check_offsets(launch)
        kernel = self.kernel(launch)
        chosen = config or self.config(launch, kernel)
        shares = _has_tiles(launch)
        smaller = [dataclasses.replace(chosen, share_tiles=True)] * shares + [
            dataclasses.replace(chosen, num_stages=s) for s in range(chosen.num_stages - 1, 2, -1)
        ] if chosen.pingpong else []
        others = [c for c in tuning.candidates(kernel.variant, self.pingpong, shares) if c != chosen]
        fallbacks = [] if config else list(dict.fromkeys(smaller + others))
        for candidate in (chosen, *fallbacks):
            plan = self.plan(launch, candidate)
            try:
                return plan, plan.run(launch.concat or launch.a, launch.b, launch.values, launch.out,
                                      launch.seed, (launch.m_limit, launch.k_limit))
            except OutOfResources:
                if config:
                    raise
        raise LaunchError(f"no kernel configuration of {self.program.name} fits this GPU")

    def plan(self, launch: Launch, config: Config) -> Plan:
        """The launch's Plan in `config`; a Concat A whose pieces one kernel cannot read as they
        lie is joined (torch.cat) at every run."""
        if _readable_pieces(launch, config):
            return Plan(self.kernel(launch, config), config, launch)
        joined = dataclasses.replace(launch, a=launch.whole_a(), concat=None)
        return Plan(self.kernel(joined, config), config, joined, join_pieces=True)

    def kernel(self, launch: Launch, config: Config | None = None) -> Kernel:
        """The kernel for this launch's operand signature, in the mainloop `config` picks."""
        variant = _variant(launch)
        if config is not None:
            variant = config.mainloop(variant)
        if variant == "pingpong" and config.pair_rows and config.share_tiles:
            raise LaunchError("pair_rows and share_tiles cannot be combined (each warpgroup stages its own "
                              "tile operands): give a configuration without one of them")
        if variant == "pingpong" and not self.pingpong:
            raise LaunchError(f"{self.program.name} reads its prior output (`output += ...`), which "
                              f"the ping-pong kernel cannot: give a configuration without pingpong")
        sig = _signature(launch, variant, config is None or config.stage_tiles,
                         config is None or config.stage_outputs, config is not None and config.share_tiles)
        key = (sig, variant)
        kernel = self._kernels.get(key)
        if kernel is None:
            with self._lock:
                kernel = self._kernels.get(key) or self._build(sig, variant)
                self._kernels[key] = kernel
        return kernel

    def config(self, launch: Launch, kernel: Kernel) -> Config:
        """The configuration for this launch's shape: tuned, cached, or the heuristic. A shape
        first launched while a CUDA graph is captured, where kernels cannot be timed (timing
        would invalidate the capture), takes a tuned configuration from the on-disk store if
        there is one, else the heuristic's, with a warning, and is tuned at its first launch
        outside a capture."""
        m, n, k, a = launch.m, launch.n, launch.k, launch.a
        if not a.is_cuda:   # the interpreter's (or, for `explain`, what it would run)
            return tuning.INTERPRETER_CONFIG
        if kernel.variant == "map":
            reductions = [spec.reduction or "tile" for spec in launch.outputs]
            return tuning.map_config("tile" in reductions, any(r.startswith("col") for r in reductions), n)
        bucket = (kernel.variant, str(a.dtype), 1 << max(m - 1, 0).bit_length(), n, k,
                  _layout(launch))
        config = self._configs.get(bucket)
        if config is not None:
            return config
        heuristic = tuning.heuristic(kernel.variant, m, n, k, self.pingpong, self.packs,
                                     launch.m_limit is not None,
                                     launch.concat is not None and launch.concat.dim == 1, _sums_a(launch))
        if os.environ.get("CODA_AUTOTUNE", "1") == "0":
            self._configs[bucket] = heuristic
            return heuristic
        key = "|".join(map(str, (self.fingerprint, torch.cuda.get_device_name(a.device), *bucket)))
        if torch.cuda.is_current_stream_capturing():
            stored = tuning.STORE.get(key)
            if stored is None:
                warnings.warn(f"CODA: {self.program.name} {m}x{n}x{k} is first launched while a CUDA graph "
                              f"is captured, where its kernel configurations cannot be timed; this graph "
                              f"runs the heuristic's (launch it once before capturing to autotune it)",
                              stacklevel=2)
            return stored or heuristic
        scratch = None if launch.out is None else launch.out.clone()   # tuning never touches `out=`
        plans: dict[Config, Plan] = {}

        def run(c: Config) -> None:
            if c not in plans:
                plans[c] = self.plan(launch, c)
            plans[c].run(launch.concat or launch.a, launch.b, launch.values, scratch, launch.seed,
                         (launch.m_limit, launch.k_limit))

        config = tuning.autotune(key, tuning.candidates(kernel.variant, self.pingpong, _has_tiles(launch)),
                                 run, f"{self.program.name} {m}x{n}x{k}")
        self._configs[bucket] = config
        return config

    def explain(self, launch: Launch) -> str:
        config = self.config(launch, self.kernel(launch))
        kernel = self.kernel(launch, config)
        return (f"# Triton kernel ({kernel.variant} mainloop), config {config}\n"
                f"{kernel.source}")

    # building ---------------------------------------------------------------------------------
    def _build(self, sig: Signature, variant: str) -> Kernel:
        gluon = variant == "pingpong"
        parts = pingpong_parts(self.program, sig) if gluon else {
            "{EPILOGUE_ARGS}": "".join(f", {p}" for p in epilogue_args(self.program, sig)),
            "{PROLOGUE}": descriptor_prologue(self.program, sig)}
        parts["{EPILOGUE_PARAMS}"] = "".join(f", {p}" for p in kernel_params(self.program, sig))
        # the kernel's name, what profilers show: coda_gemm_<program> or coda_map_<program>
        name = f"coda_{'map' if variant == 'map' else 'gemm'}_" + re.sub(r"\W", "_", self.program.name)
        parts["{KERNEL}"] = name
        mainloop = MAINLOOPS[variant]
        for placeholder, text in parts.items():
            mainloop = mainloop.replace(placeholder, text)
        source = (HEADER.format(NAME=self.program.name, VARIANT=variant)
                  + generate_epilogue(self.program, sig, gluon, variant in ZERO_PAST_EDGES) + mainloop
                  + generate_finish(self.program, sig))
        digest = hashlib.sha256(source.encode()).hexdigest()[:20]
        stem = re.sub(r"\W", "_", self.program.name)[:MAX_FILE_STEM]
        path = _source_file(f"{stem}_{digest}.py", source)
        spec = importlib.util.spec_from_file_location(f"coda_generated_{digest}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return Kernel(variant, source, getattr(module, name), getattr(module, "finish", None))


#: How much of the kernel's name its source file's name takes: the digest tells files apart, and
#: file systems refuse names longer than 255 bytes (a program may be named at any length).
MAX_FILE_STEM = 80


def _source_file(filename: str, source: str) -> Path:
    """The file that holds a generated kernel's source (Triton reads a kernel's source from its
    file): in the cache directory's `kernels/`, or, where that cannot be written (a read-only
    home, a bad CODA_CACHE_DIR), in a temporary directory of this process's own."""
    global _fallback_dir
    try:
        return _written(tuning.cache_dir() / "kernels" / filename, source)
    except OSError:
        pass
    try:
        if _fallback_dir is None:
            _fallback_dir = Path(tempfile.mkdtemp(prefix="coda-kernels-"))
            warnings.warn(f"CODA cannot write its kernel cache in {tuning.cache_dir()}; generated "
                          f"kernels go to {_fallback_dir} for this process (set CODA_CACHE_DIR to a "
                          f"writable directory to keep them)", stacklevel=4)
        return _written(_fallback_dir / filename, source)
    except OSError as err:
        raise LaunchError(f"CODA cannot write generated kernel source to {tuning.cache_dir()} nor to a "
                          f"temporary directory ({err}); set CODA_CACHE_DIR to a writable one") from None


def _written(path: Path, source: str) -> Path:
    """`path`, holding `source`: written when it is missing or holds anything else (a file cut
    short by a crash, edited by hand), atomically (another process may be writing it too)."""
    try:
        held = path.read_bytes()
    except OSError:
        held = None
    if held != source.encode():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(source)
        os.replace(tmp, path)
    return path


_fallback_dir: Path | None = None


class Plan:
    """A ready launch for fixed shapes, strides and dtypes. The first `run` goes through Triton's
    JIT (which compiles or finds the binary); later runs call the compiled kernel directly, with
    the arguments in its signature order, skipping the per-call specialization work."""

    def __init__(self, kernel: Kernel, config: Config, launch: Launch, join_pieces: bool = False):
        a, b, m, n = launch.a, launch.b, launch.m, launch.n
        self.kernel, self.config = kernel, config
        defaults = {p.name: p.default for p in launch.program.ir.params.values()}
        self.operands = [(name, kind, defaults[name]) for name, kind in launch.kinds.items()]
        self.tile_operands = tile_operands(launch.kinds)   # the ones out= may be (binding.py)
        # `a_col_sums=True`: the K loop's partial sums of A's columns go in their own argument
        self.outputs = tuple(spec for spec in launch.outputs if spec.name != A_COL_SUMS)
        self.a_col_sums = next((spec for spec in launch.outputs if spec.name == A_COL_SUMS), None)
        if kernel.variant == "map":
            self.sizes = (m, n, a.stride(0), a.stride(1))
        else:
            self.sizes = (m, n, launch.k, a.stride(0), a.stride(1), b.stride(0), b.stride(1))
        # A Concat A (or map input X): pieces 1-3's pointers follow the sizes (A itself in unused
        # places), then where they start along the joined axis (padded with its length; one
        # piece spans K).
        # `join_pieces`: the plan was made for the joined tensor (TritonProgram.plan), so each
        # run joins a Concat's pieces.
        pieces, self.join_pieces = launch.a_pieces, join_pieces
        concat_k = len(pieces) == 1 or launch.concat.dim == 1
        ends = [sum(p.shape[1 if concat_k else 0] for p in pieces[:i + 1]) for i in range(len(pieces))]
        self.cuts = tuple(ends[:-1]) + (ends[-1],) * (MAX_PIECES - len(pieces))
        # persistent Hopper kernels: one program per SM, TMA descriptors made on the device
        self.persistent = persistent = kernel.variant in ("hopper", "pingpong")
        epilogue_n = config.epilogue_block_n if persistent else config.block_n
        # (pair_rows: a tile is two row blocks, the last one's second perhaps past M)
        pairs = 1 + config.pair_rows
        row_blocks = pairs * math.ceil(m / (pairs * config.block_m))
        self.partial_rows = {"row": math.ceil(n / epilogue_n), "col": row_blocks}
        tiles = math.ceil(m / config.block_m) * math.ceil(n / config.block_n)
        # stream-K: one program an SM, each taking an equal run of all tiles' K blocks
        self.takes_stream_k = kernel.variant == "hopper"
        self.stream_k = self.takes_stream_k and config.stream_k
        # (under m_limit / k_limit the kernel's K blocks, fewer than planned, could leave a run
        # empty, whose flag a tile's first run would wait for in vain)
        if self.stream_k and (len(launch.a_pieces) > 1 or self.a_col_sums is not None
                              or launch.m_limit is not None or launch.k_limit is not None):
            raise LaunchError("a stream-K configuration takes one A tensor, and no a_col_sums, "
                              "m_limit or k_limit")
        if persistent:
            runs = tiles * max(1, math.ceil(launch.k / config.block_k)) if self.stream_k else tiles
            self.grid = (min(runs, _num_sms(a.device)),)
            self.meta = config.meta(kernel.variant) | dict(
                A_K_CONTIGUOUS=a.stride(1) == 1, B_N_CONTIGUOUS=b.stride(1) == 1)
            if kernel.variant == "hopper":
                self.meta["NUM_SMS"] = self.grid[0]
        else:
            self.grid, self.meta = (tiles,), config.meta(kernel.variant)
            if kernel.variant == "portable":
                self.meta["DOT_PRECISION"] = dot_precision(a.dtype)
        # m_limit / k_limit: pointers to the limits follow the cuts (A itself where there is none)
        self.limited = (launch.m_limit is not None, launch.k_limit is not None)
        self.meta |= dict(LIMIT_M=self.limited[0]) if kernel.variant == "map" else dict(
            LIMIT_M=self.limited[0], LIMIT_K=self.limited[1])
        self.meta |= dict(A_PIECES=len(pieces), A_CONCAT_K=concat_k)
        if kernel.variant != "map":
            self.meta["SUM_A"] = self.a_col_sums is not None
        if kernel.variant == "hopper" and (len(pieces) > 1 or self.a_col_sums is not None):
            # pieces_product's loops are no plain nest, and the column sums of A put an `if`
            # in the K loop: neither can be flattened
            self.meta["FLATTEN"] = False
        names = kernel.fn.arg_names
        self.constexprs = [self.meta[name] for name in names if name in self.meta]
        self.launcher = None
        self.compiled = None   # Triton's CompiledKernel after the first run (n_regs, n_spills, asm)
        reductions = [spec for spec in launch.outputs if spec.reduction is not None]
        # row sums left as partials (`unfinished=`): each launch's own buffer, returned unfinished
        self.unfinished = launch.unfinished
        finished = [spec for spec in reductions
                    if spec is not self.a_col_sums and spec.name not in self.unfinished]
        # every finished reduction a float32 row sum or maximum that one column tile (or epilogue
        # slice) holds whole: that tile's partial is the result, written where it goes, and no
        # finishing kernel runs
        self.direct = (self.partial_rows["row"] == 1 and self.a_col_sums is None and bool(finished)
                       and all(spec.reduction in ("row_sum", "row_max") and spec.dtype == torch.float32
                               for spec in finished))
        axes = set() if self.direct else {spec.reduction[:3] for spec in finished}
        if self.a_col_sums is not None and A_COL_SUMS not in self.unfinished:
            axes.add("a")
        self.finisher = _Finisher(kernel.finish, m, n, launch.k, self.partial_rows, axes,
                                  self.limited[0], config.block_m) if axes else None
        # float32 partials of each reduction: [tiles along the reduced axis, its length], two
        # (max and sum) for a log-sum-exp
        self.partial_shapes = {spec.name: [(self.partial_rows[spec.reduction[:3]], spec.shape[0])]
                               * (2 if spec.reduction == "row_logsumexp" else 1) for spec in reductions
                               if spec.name not in self.unfinished and not self.direct}
        # A's column sums left unfinished: [row blocks, K], fresh for each launch
        self.a_col_sums_parts = (self.partial_rows["col"], launch.k)
        partial_bytes = 4 * sum(r * c for shapes in self.partial_shapes.values() for r, c in shapes)
        if self.stream_k:   # a run's float32 partial tile and its flag (codegen/mainloops.py)
            self.partial_shapes[STREAM_K_PARTIALS] = [(self.grid[0], config.block_m * config.block_n)]
            partial_bytes += 4 * self.grid[0] * config.block_m * config.block_n
        # (stream-K's are kept at any size: fresh flags are a memset a launch)
        self.keep_partials = partial_bytes <= KEPT_PARTIAL_BYTES or self.stream_k
        self._kept = threading.local()   # each host thread's sets, released with the thread

    @property
    def kept_partials(self) -> dict[int | None, dict[str, list[torch.Tensor]]]:
        """This host thread's kept partial buffers, by stream (`_partials`): per thread, so that
        a thread's end releases its sets (keyed by the thread's id, they were kept for good)."""
        if not hasattr(self._kept, "by_stream"):
            self._kept.by_stream = {}
        return self._kept.by_stream

    def run(self, a: torch.Tensor | Concat, b: torch.Tensor, values: dict, out: torch.Tensor | None,
            seed: int, limits: tuple = (None, None)) -> dict[str, torch.Tensor]:
        pieces = (a,)
        if isinstance(a, Concat):
            pieces = (a.materialize(),) if self.join_pieces else a.pieces
        a = pieces[0]
        m_limit, k_limit = (a if limit is None else limit for limit in limits)
        device = a.device
        partials = self._partials(device)
        if self.a_col_sums is None:
            a_sums = a   # stands in for the pointer
        elif A_COL_SUMS in self.unfinished:   # returned as Partials: fresh for each launch
            a_sums = _fresh_parts(self.a_col_sums_parts, device)
        else:
            a_sums = partials[A_COL_SUMS][0]
        # the Triton Hopper kernel's stream-K slots and flags (A itself where it runs no stream-K)
        stream_k = (partials[STREAM_K_PARTIALS] if self.stream_k else (a, a)) if self.takes_stream_k else ()
        args = [a, *(() if b is None else (b,)), *self.sizes, *pieces[1:],
                *(a,) * (MAX_PIECES - len(pieces)), *self.cuts, m_limit,
                *(() if b is None else (k_limit, a_sums)), *stream_k, seed]
        for name, kind, default in self.operands:
            value = values.get(name)
            if value is None:
                value = default
            if kind == "scalar":
                args.append(value if isinstance(value, torch.Tensor) else as_float(value))
            elif kind == "tile":
                args += (value, *value.stride())
            elif kind == "head":
                args += (value, *value.stride(), value.shape[1])
            elif isinstance(value, Partials):   # a row's parts, added as they are loaded
                args += (value.parts, value.parts.stride(1), value.parts.stride(0), value.parts.shape[0])
            else:   # a row or a column: its one stride
                args += (value, value.stride()[0])
        outputs, finish_args = {}, []
        for spec in self.outputs:
            if spec.reduction is None:
                tensor = out if spec.name == "output" and out is not None else torch.empty(
                    spec.shape, dtype=spec.dtype, device=device)
                args += (tensor, *tensor.stride())
            elif spec.name in self.unfinished:   # fresh: the caller keeps them
                parts = _fresh_parts((self.partial_rows["row"], self.sizes[0]), device)
                args += (parts, parts.stride(0))
                tensor = Partials(parts)
            elif self.direct:   # its one partial is the result
                tensor = torch.empty(spec.shape, dtype=spec.dtype, device=device)
                args.append(tensor)
            else:
                tensor = torch.empty(spec.shape, dtype=spec.dtype, device=device)
                args += partials[spec.name]
                finish_args += (*partials[spec.name], tensor)
            outputs[spec.name] = tensor
        if self.a_col_sums is not None and A_COL_SUMS in self.unfinished:
            outputs[A_COL_SUMS] = Partials(a_sums)
        elif self.a_col_sums is not None:   # finished last (codegen/finish.py)
            spec = self.a_col_sums
            outputs[spec.name] = torch.empty(spec.shape, dtype=spec.dtype, device=device)
            finish_args += (a_sums, outputs[spec.name])
        if self.launcher is not None:
            self.launcher(*args, *self.constexprs)
        else:
            if self.persistent:
                _ensure_allocator()
            self.compiled, self.launcher = first_launch(self.kernel.fn, self.grid, args, self.meta, device)
        if out is not None:   # written through its pointer: autograd's check of saved tensors sees it
            torch.autograd.graph.increment_version(out)
        if self.finisher is not None:
            self.finisher([m_limit, *finish_args], device)
        return outputs

    def _partials(self, device: torch.device) -> dict[str, list[torch.Tensor]]:
        """The reductions' partial buffers: the kernel writes them and the finishing kernel
        reads them right after, on one stream, so one set per stream and host thread serves
        every launch (stream order keeps one thread's launches apart; two threads on one stream
        could enqueue kernel, kernel, finish, finish; an allocation costs ~4 us of host time on
        the H200 machine, docs/performance.md).
        Fresh ones while a CUDA graph is captured (its memory pool owns what its kernels
        touch) and above KEPT_PARTIAL_BYTES (a large launch does not notice the allocation)."""
        stream = None
        if device.type == "cuda":
            if torch._C._cuda_isCurrentStreamCapturing():
                return self._new_partials(device)
            stream = torch._C._cuda_getCurrentRawStream(device.index)
        kept = self.kept_partials.get(stream)
        if kept is None:
            kept = self._new_partials(device)
            if self.keep_partials:
                self.kept_partials[stream] = kept
        return kept

    def _new_partials(self, device: torch.device) -> dict[str, list[torch.Tensor]]:
        partials = {name: [torch.empty(shape, dtype=torch.float32, device=device) for shape in shapes]
                    for name, shapes in self.partial_shapes.items()}
        if self.stream_k:   # the runs' flags start lowered; the kernel lowers each one it reads
            partials[STREAM_K_PARTIALS].append(torch.zeros(self.grid[0], dtype=torch.int32, device=device))
        return partials


def _fresh_parts(shape: tuple[int, int], device: torch.device) -> torch.Tensor:
    """A launch's own [parts, length] buffer of unfinished sums; one part of zeros where no tile
    runs along the summed axis (N or M is 0: the sums are 0, as finished ones would be)."""
    if shape[0] == 0:
        return torch.zeros((1, shape[1]), dtype=torch.float32, device=device)
    return torch.empty(shape, dtype=torch.float32, device=device)


class _Finisher:
    """The launch of a Plan's finishing kernel (codegen/finish.py): program i merges row block i
    of the row partials and column block i of the column ones (of the epilogue's column
    reductions, axis "col", and of A's column sums, axis "a"), in steps of `merge_tile`. Under
    a limit on M (its pointer is the first buffer) the kernel's tiles of `block_m` rows past it
    wrote no partials, which the merge then skips."""

    def __init__(self, fn: Callable, m: int, n: int, k: int, partial_rows: dict[str, int],
                 axes: set[str], limit_m: bool, block_m: int):
        row_p, row_block = merge_tile(partial_rows["row"])
        col_p, col_block = merge_tile(partial_rows["col"])
        self.fn, self.sizes = fn, (m, n, k, partial_rows["row"], partial_rows["col"])
        programs = {"row": math.ceil(m / row_block), "col": math.ceil(n / col_block),
                    "a": math.ceil(k / col_block)}
        self.grid = (max(programs[axis] for axis in axes),)
        self.meta = dict(ROW_P=row_p, ROW_BLOCK=row_block, COL_P=col_p, COL_BLOCK=col_block,
                         LIMIT_M=limit_m, TILE_M=block_m)
        self.constexprs = [self.meta[name] for name in fn.arg_names if name in self.meta]
        self.launcher = None

    def __call__(self, buffers: list[torch.Tensor], device: torch.device) -> None:
        if self.launcher is not None:
            self.launcher(*self.sizes, *buffers, *self.constexprs)
        else:
            _, self.launcher = first_launch(self.fn, self.grid, [*self.sizes, *buffers], self.meta, device)


#: Triton's interpreter keeps a launch's state (its grid) in globals: two host threads launching
#: at once failed inside it, so on the CPU launches take turns
_INTERPRETER_TURN = threading.Lock()


def one_at_a_time(device: torch.device):
    """The context a launch on `device` runs in: the interpreter's turn on the CPU, none on a
    GPU."""
    return _INTERPRETER_TURN if device.type != "cuda" else contextlib.nullcontext()


def first_launch(fn, grid: tuple[int], args: list, meta: dict, device: torch.device):
    """Launch `fn` through Triton's JIT (which compiles or finds the binary): (its compiled
    kernel, a direct launcher of it for the later launches), or (None, None) where there is no
    compiled CUDA kernel (the interpreter)."""
    with one_at_a_time(device):
        compiled = fn[grid](*args, **meta)
    if device.type == "cuda" and hasattr(compiled, "packed_metadata"):
        return compiled, direct_launcher(compiled, grid, device)
    return None, None


def _specialization(arg) -> tuple | type:
    """What Triton specializes a compiled kernel on, for one argument: a tensor's dtype and
    16-byte alignment, an integer's divisibility by 16, whether it is 1 and whether it fits in
    32 bits; a float's type."""
    if isinstance(arg, torch.Tensor):
        return (arg.dtype, arg.data_ptr() % 16 == 0)
    if isinstance(arg, int) and not isinstance(arg, bool):
        return (int, arg == 1, arg % 16 == 0, -(2**31) <= arg < 2**31)
    return type(arg)


_DIRECT: dict[tuple, tuple[Callable[..., None], list]] = {}   # key: (launcher, its constexprs)
MAX_DIRECT = 256   # grids that keep changing (a sequence length per batch): start over past this


def launch_cached(fn, grid: tuple[int], args: list, meta: dict, device: torch.device) -> None:
    """Launch a hand-written Triton kernel (coda.nn.layer_norm_grad's): through Triton's JIT the
    first time for each grid and specialization of the arguments, then through the compiled
    kernel's direct launcher, as a Plan does (Triton's own dispatch costs tens of microseconds
    of host time a launch, which a step without a CUDA graph pays: docs/performance.md).
    `args` are the kernel's non-constexpr arguments in order; `meta`, its constexprs and launch
    options."""
    key = (fn, grid, device, tuple(map(_specialization, args)), tuple(meta.items()))
    cached = _DIRECT.get(key)
    if cached is not None:
        launcher, constexprs = cached
        launcher(*args, *constexprs)
        return
    _, launcher = first_launch(fn, grid, args, meta, device)
    if launcher is not None:
        if len(_DIRECT) >= MAX_DIRECT:
            _DIRECT.clear()
        _DIRECT[key] = launcher, [meta[name] for name in fn.arg_names if name in meta]


def direct_launcher(compiled, grid: tuple[int], device: torch.device) -> Callable[..., None]:
    """A launcher of Triton's compiled kernel that does its per-call Python once: the stream is
    read from PyTorch, the launch hooks are passed only while a profiler has set some, and the
    scratch memory of device-side TMA descriptors is kept per stream (launches on one stream run
    in order, so one buffer serves them all). A launch captured in a CUDA graph takes a buffer of
    its own from the graph's pool, as the reductions' partials do: two graphs captured on one
    stream may be replayed side by side on two."""
    from triton import knobs

    runner, run = compiled[(*grid, 1, 1)], compiled.run

    def triton_launch(*args) -> None:
        """Triton's own path, which takes the TMA scratch from Triton's allocator: set per
        thread, and this may not be the thread of the first launch (autograd's backward)."""
        _ensure_allocator()
        runner(*args)

    if run.profile_scratch_size:   # an instrumented kernel
        return triton_launch
    launch, function, packed = run.launch, compiled.function, compiled.packed_metadata
    cooperative, pdl = run.launch_cooperative_grid, run.launch_pdl
    scratch_bytes = math.prod(grid) * run.num_ctas * run.global_scratch_size
    scratch: dict[int, torch.Tensor] = {}
    hooks, current_stream, index = knobs.runtime, torch._C._cuda_getCurrentRawStream, device.index
    capturing = torch._C._cuda_isCurrentStreamCapturing

    def launcher(*args) -> None:
        if hooks.launch_enter_hook.calls or hooks.launch_exit_hook.calls:
            return triton_launch(*args)
        stream = current_stream(index)
        if scratch_bytes and capturing():   # the graph's own buffer, from its memory pool
            buffer = torch.empty(scratch_bytes, dtype=torch.uint8, device=device)
        else:
            buffer = scratch.get(stream)
            if buffer is None and scratch_bytes:
                buffer = scratch[stream] = torch.empty(scratch_bytes, dtype=torch.uint8, device=device)
        launch(grid[0], 1, 1, stream, function, cooperative, pdl, buffer, None, packed, None, None,
               None, *args)
    return launcher


def _staged_operands(launch: Launch) -> set[str]:
    """The tile operands the Hopper kernels stage in shared memory by TMA (`op_<name>`): every
    one TMA can address."""
    return {f"op_{name}" for name, kind in launch.kinds.items()
            if kind == "tile" and _tma_ok(launch.values[name], row_major=True)}


def _has_tiles(launch: Launch) -> bool:
    """Whether the launch has staged tile operands, which a ping-pong kernel's two warpgroups
    could keep in one set of buffers (`Config.share_tiles`; without any, such a configuration is
    its twin without sharing, not worth timing or trying again)."""
    return bool(_staged_operands(launch))


def _signature(launch: Launch, variant: str, stage_tiles: bool = True,
               stage_outputs: bool = True, share_tiles: bool = False) -> Signature:
    """The launch's operand kinds and which tiles go through TMA: on Hopper every aligned
    output but a packed [M, 2N] one, and every aligned tile operand, unless the ping-pong kernel
    loads the operands itself (`stage_tiles=False`) or stores the outputs from registers in
    16-byte pieces (`stage_outputs=False`: `sig.wide`). The ping-pong kernel stages a packed
    output too where two operands' buffers can hold its halves (`_reuse`), and with
    `share_tiles` its two warpgroups stage their operands in one set of buffers."""
    tensors = frozenset(name for name, kind in launch.kinds.items()
                        if kind == "scalar" and isinstance(launch.values[name], torch.Tensor))
    tma, wide = set(), set()
    if variant == "hopper" or (variant == "pingpong" and stage_tiles):
        tma |= _staged_operands(launch)
    packed = set()   # aligned pack(...) outputs: [M, 2N]
    if variant in ("hopper", "pingpong"):
        for spec in launch.outputs:
            if spec.reduction is not None:
                continue
            out = launch.out if spec.name == "output" else None
            # an allocated output is contiguous: its row stride is its width; an `out=` tensor
            # may have a wider one (padded rows: the cross-entropy's blocks)
            if not (_tma_ok(out, row_major=True) if out is not None
                    else spec.shape[-1] * spec.dtype.itemsize % 16 == 0):
                continue
            if launch.program.widths.outputs[spec.name] == DOUBLE:
                packed.add(f"out_{spec.name}")
            else:
                (tma if variant == "hopper" or stage_outputs else wide).add(f"out_{spec.name}")
    reuse = _reuse(launch, tma, packed if stage_outputs else set()) if variant == "pingpong" else ()
    # a packed output is stored through pointers unless staged in operands' buffers: its tile is
    # twice the width of the epilogue's, wider than a TMA box may be in the widest configurations
    tma |= {out for out, _ in reuse}
    written = tuple(spec.name for spec in launch.outputs)
    partials = frozenset(name for name, value in launch.values.items() if isinstance(value, Partials))
    shared = share_tiles and variant == "pingpong" and any(base.startswith("op_") for base in tma)
    return Signature(tuple(launch.kinds.items()), tensors, written, frozenset(tma), reuse, shared,
                     frozenset(wide), partials, launch.unfinished)


def _reuse(launch: Launch, tma: set[str], packed: set[str]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """(output, operands) of TMA tiles of one dtype: the ping-pong kernel stages the output of a
    slice in the buffer its operand of the same width came in, or a packed output (`packed`,
    twice the tile's width) in the buffers of two full-width operands, one half in each
    (epilogue.pingpong_parts). Outputs no buffer is free for keep their own (packed: none)."""
    program = launch.program
    free = {f"op_{name}": (launch.values[name].dtype, half_width(program, f"op_{name}"))
            for name, kind in launch.kinds.items() if kind == "tile" and f"op_{name}" in tma}
    pairs = []
    for spec in launch.outputs:
        base = f"out_{spec.name}"
        if base in tma:
            key, count = (spec.dtype, half_width(program, base)), 1
        elif base in packed:
            key, count = (spec.dtype, False), 2
        else:
            continue
        operands = [op for op in sorted(free) if free[op] == key][:count]
        if len(operands) == count:
            pairs.append((base, tuple(operands)))
            for operand in operands:
                del free[operand]
    return tuple(pairs)


def check_dtypes(launch: Launch) -> None:
    """The dtypes the Triton backend takes (A, B, tile outputs): a LaunchError otherwise."""
    if launch.b is None:
        if launch.a.dtype not in _TRITON_DTYPES:
            raise LaunchError(f"X has dtype {launch.a.dtype}: the Triton backend takes float16, "
                              f"bfloat16 or float32; use backend='reference' for float64")
        return
    for name, x in (("A", launch.a), ("B", launch.b)):
        if x.dtype not in _TRITON_DTYPES:
            raise LaunchError(f"{name} has dtype {x.dtype}: the Triton backend takes float16, "
                              f"bfloat16 or float32 (tf32 tensor cores); use backend='reference' "
                              f"for float64")
    # (a reduction, summed in float32 like every one, may be stored in float64: its finishing
    # kernel converts; a float64 parameter's gradient of float32 activations is one)
    if any(s.dtype == torch.float64 and s.reduction is None for s in launch.outputs):
        raise LaunchError("float64 tile outputs (out_dtype or dtypes=) are not supported by the Triton "
                          "backend; reductions may be float64")


#: the elements a kernel's 32-bit offsets reach (row index times row stride, and the like)
OFFSET_LIMIT = 2**31 - 1


def _check_offsets(launch: Launch) -> None:
    """The kernels compute addresses as 32-bit offsets from a tensor's start (Triton passes
    strides below 2**31 as int32): a tensor whose last element lies past 2**31 - 1 elements
    (an output of 65536 x 32768, a column slice of a very wide matrix) would be read or written
    at wrapped offsets. Such a launch is refused rather than run wrong."""
    tensors = [(f"A piece {i}" if launch.concat else ("A" if launch.b is not None else "X"), x)
               for i, x in enumerate(launch.a_pieces)]
    tensors += [("B", launch.b), ("out=", launch.out)]
    for name, value in launch.values.items():
        tensors.append((f"operand {name!r}", value.parts if isinstance(value, Partials) else value))
    reach = [(name, _reach(x)) for name, x in tensors if isinstance(x, torch.Tensor)]
    reach += [(f"output {spec.name!r}", math.prod(spec.shape)) for spec in launch.outputs]
    for name, elements in reach:
        if elements > OFFSET_LIMIT:
            raise LaunchError(f"{name} spans {elements} elements, past the {OFFSET_LIMIT} that the "
                              f"Triton kernels' 32-bit offsets reach: split the launch along M (its "
                              f"rows), or run it with backend='reference'")


def _reach(x: torch.Tensor) -> int:
    """The elements from x's first to its last, inclusive (0 for an empty tensor)."""
    if x.numel() == 0:
        return 0
    return 1 + sum((size - 1) * abs(stride) for size, stride in zip(x.shape, x.stride(), strict=True))


def _layout(launch: Launch) -> str:
    """What a tuned configuration depends on besides dtype and shape: the operands' layouts, a
    Concat's pieces, limits (a launch under `m_limit` is tuned on the rows it ran with, which
    says little about the same shape without one) and A's column sums (which the Triton kernel
    takes from a second read of A: a configuration chosen without them is no guide)."""
    b_layout = "-" if launch.b is None else int(launch.b.stride(1) == 1)
    pieces = f"{len(launch.a_pieces)}{'mk'[launch.concat.dim]}" if launch.concat else ""
    limits = "".join(axis for axis, limit in (("m", launch.m_limit), ("k", launch.k_limit))
                     if limit is not None)
    suffix = (f"-limit{limits}" if limits else "") + ("-sums" if _sums_a(launch) else "")
    return f"a{int(launch.a.stride(1) == 1)}{pieces}b{b_layout}{suffix}"


def _sums_a(launch: Launch) -> bool:
    return any(spec.name == A_COL_SUMS for spec in launch.outputs)


def _readable_pieces(launch: Launch, config: Config) -> bool:
    """Whether one kernel reads a Concat's pieces as they lie: every piece with the first one's
    strides, and pieces joined in whole tiles where a tile reads one piece (a GEMM's A along M,
    in row blocks; a map's X, in row or column blocks). A GEMM's K loop walks pieces of any
    width (in whole K blocks where the ping-pong kernel sums A's columns). The paired ping-pong
    kernel (`pair_rows`) reads one A tensor."""
    pieces, concat = launch.a_pieces, launch.concat
    if any(p.stride() != pieces[0].stride() for p in pieces) or (config.pair_rows and len(pieces) > 1):
        return False
    if concat is not None and concat.dim == 1 and config.pingpong and _sums_a(launch):
        # the ping-pong kernel's column sums of A take K block kb to be A's columns from
        # kb * BLOCK_K: pieces along K in whole K blocks
        return all(p.shape[1] % config.block_k == 0 for p in pieces[:-1])
    if concat is None or (concat.dim == 1 and launch.b is not None):
        return True
    block = config.block_n if concat.dim == 1 else config.block_m
    return all(p.shape[concat.dim] % block == 0 for p in pieces[:-1])


def dot_precision(dtype: torch.dtype) -> str:
    """How the portable kernel's tensor cores take float32 operands: as PyTorch's own float32
    matmuls do under `torch.set_float32_matmul_precision` (or `torch.backends.cuda.matmul.
    fp32_precision`: program.tf32_matmuls). "highest" (PyTorch's default): 3xTF32,
    each operand split into its TF32 part and the TF32 remainder, three MMAs for about float32's
    accuracy; "high" or "medium": one TF32 MMA (10-bit mantissas, ~1e-3 relative error; 2-3x
    the error of cuBLAS's TF32 GEMMs in tests/examples/test_layer_scale.py on an H100, fifty-eighth
    session). Other dtypes ignore it."""
    if dtype == torch.float32 and not tf32_matmuls():
        return "tf32x3"
    return "tf32"


def _variant(launch: Launch) -> str:
    """`map` without B, `hopper` where TMA descriptors can describe A (each piece of a Concat)
    and B, else `portable`."""
    a, b = launch.a, launch.b
    if b is None:
        return "map"
    if not a.is_cuda or torch.cuda.get_device_capability(a.device)[0] != 9:
        return "portable"
    if a.dtype not in (torch.float16, torch.bfloat16):
        return "portable"
    return "hopper" if all(map(_tma_ok, launch.a_pieces)) and _tma_ok(b) else "portable"


def _tma_ok(x: torch.Tensor, row_major: bool = False) -> bool:
    """A 2-D tensor TMA can address: 16-byte aligned, one unit stride (the last one if
    `row_major`), the other a nonzero multiple of 16 bytes (an expanded view, stride 0, is
    read through pointers: a tensor map's strides step over whole rows)."""
    size = x.element_size()
    if x.data_ptr() % 16:
        return False
    if x.stride(1) == 1:
        return x.stride(0) != 0 and (x.stride(0) * size) % 16 == 0
    return not row_major and x.stride(0) == 1 and x.stride(1) != 0 and (x.stride(1) * size) % 16 == 0


_sm_counts: dict[int, int] = {}


def _num_sms(device: torch.device) -> int:
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _sm_counts:
        _sm_counts[index] = torch.cuda.get_device_properties(index).multi_processor_count
    return _sm_counts[index]


def _alloc(size: int, alignment: int, stream) -> torch.Tensor:
    return torch.empty(size, device="cuda", dtype=torch.int8)


def _ensure_allocator() -> None:
    """Device-side tensor descriptors need scratch memory from a Triton allocator, which Triton
    keeps per thread: autograd runs backward passes on threads of its own."""
    if not getattr(_thread, "allocator_set", False):
        import triton

        triton.set_allocator(_alloc)
        _thread.allocator_set = True
