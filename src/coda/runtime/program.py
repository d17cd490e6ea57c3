"""`Program`: a checked, optimized epilogue that launches as GEMM + epilogue on any backend."""

from __future__ import annotations

import math
import os

import torch

from ..errors import LaunchError
from ..ir import LAUNCH_OPTIONS, Epilogue, format_epilogue
from ..passes import optimize, widths
from ..passes.widths import COLUMNS
from .binding import (
    Concat,
    Launch,
    bind,
    check_out_per_call,
    check_per_call,
    check_strided,
    probability_operands,
)
from .partials import Partials
from .reference import run_reference
from .rng import seed_word

BACKENDS = ("auto", "triton", "reference")
#: The launch plans a program keeps (one per layout of its operands: shapes, strides, dtypes),
#: each with its reductions' partial buffers; a program launched on ever new shapes (batches of
#: varying length) drops them all when it reaches this many, rather than hold them for good. A
#: dropped plan costs its next launch the planning (its kernel stays compiled).
MAX_PLANS = 256


def _meta(x) -> tuple | type:
    """What a launch plan depends on: a tensor's layout (and 16-byte alignment, on which Triton
    specializes pointers), a Concat's pieces' and axis, Partials' partials, or a non-tensor's
    type. A lazily negated view's key differs from its plain twin's, so that it goes through
    `bind`, which refuses it."""
    if isinstance(x, torch.Tensor):
        if x.layout != torch.strided:   # sparse: no strides; bind refuses it, so no plan has it
            return (x.layout,)
        return (x.shape, x.stride(), x.dtype, x.device, x.data_ptr() % 16 == 0, x.is_neg())
    if isinstance(x, Concat):
        return (x.dim, *map(_meta, x.pieces))
    if isinstance(x, Partials):
        return (Partials, _meta(x.parts))
    return type(x)


def flatten_leading(a: torch.Tensor, b, operands: dict, out) -> tuple[torch.Size, tuple]:
    """A [..., M, K] (a map's x [..., M, N]) runs as one launch on its rows, [rows, K]: as
    `torch.matmul` broadcasts a 2-D B, and with column reductions over every row (a bias
    gradient over batch and sequence). Returns (the leading dimensions, (A, B, operands, out) as
    rows): tile and `head` operands [..., M, X] and `out=` become [rows, X], row operands [..., M]
    become [rows]; columns, scalars and Partials stay as they are. A copy is made only where a
    tensor's strides do not allow a view (`out=` must allow one: the launch writes into it)."""
    lead = a.shape[:-2]
    for name, x in (("A", a), ("out=", out), *((f"operand {n!r}", v) for n, v in operands.items())):
        if isinstance(x, torch.Tensor):
            check_strided(name, x)
    if b is not None and (not isinstance(b, torch.Tensor) or b.dim() != 2):
        shape = list(b.shape) if isinstance(b, torch.Tensor) else type(b).__name__
        raise LaunchError(f"with A of shape {list(a.shape)} (leading dimensions {list(lead)}, run as "
                          f"one GEMM on its rows), B must be 2-D [K, N], got {shape}: for a batch "
                          f"of B matrices, launch once per matrix")
    flat = {}
    for name, value in operands.items():
        if isinstance(value, torch.Tensor) and value.dim() >= 2:
            if value.shape[:len(lead)] != lead or value.dim() not in (len(lead) + 1, len(lead) + 2):
                raise LaunchError(f"operand {name!r} has shape {list(value.shape)}: with A's leading "
                                  f"dimensions {list(lead)}, a tile is [{_dims(lead)}, M, N] and a "
                                  f"row vector [{_dims(lead)}, M]")
            value = value.reshape(math.prod(value.shape[:len(lead) + 1]), *value.shape[len(lead) + 1:])
        flat[name] = value
    if out is not None:
        if not isinstance(out, torch.Tensor) or out.shape[:-1] != a.shape[:-1]:
            shape = list(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            raise LaunchError(f"out=: with A of shape {list(a.shape)}, expected [{_dims(a.shape[:-1])}, "
                              f"N], got {shape}")
        try:
            out = out.view(math.prod(out.shape[:-1]), out.shape[-1])
        except RuntimeError:
            raise LaunchError(f"out= (strides {list(out.stride())}) cannot be viewed as [rows, N]: "
                              f"give a tensor whose leading dimensions flatten in place") from None
    # rows counted, not inferred (-1): with a last dimension of 0 there is nothing to infer from
    return lead, (a.reshape(math.prod(a.shape[:-1]), a.shape[-1]), b, flat, out)


def _dims(shape) -> str:
    return ", ".join(map(str, shape))


def _names(names):
    """outputs= or unfinished= in a plan's key: a list as a tuple, anything else as it is."""
    return tuple(names) if isinstance(names, (list, tuple)) else names


_fp32_precision = getattr(torch._C, "_get_fp32_precision_getter", None)   # torch >= 2.9


def tf32_matmuls() -> bool:
    """Whether torch's float32 CUDA matmuls may use TF32. Read from the setting that both
    `torch.set_float32_matmul_precision` and (torch >= 2.9) `torch.backends.cuda.matmul.
    fp32_precision` write: the old getter raises once the new API has chosen TF32, and keeps
    reporting "high" after the new API has gone back to "ieee"."""
    if _fp32_precision is None:
        return torch.get_float32_matmul_precision() != "highest"
    return _fp32_precision("cuda", "matmul") == "tf32"


#: The values of TRITON_INTERPRET that Triton reads as on (its getenv_bool, any case).
INTERPRET_ON = ("1", "true", "yes", "on", "y")


def interpreter_enabled() -> bool:
    """True when TRITON_INTERPRET is on as Triton reads it (1, true, yes, on, y): Triton kernels
    then run on CPU tensors (with TRITON_INTERPRET=true Triton interpreted, CODA did not)."""
    return os.environ.get("TRITON_INTERPRET", "0").lower() in INTERPRET_ON


def triton_runs_on(a: torch.Tensor) -> bool:
    """Whether Triton kernels can run on `a`'s device: a GPU, or the CPU under the interpreter
    (not in bfloat16, which the interpreter does not support: its results are garbage)."""
    return a.is_cuda or (a.device.type == "cpu" and interpreter_enabled() and a.dtype != torch.bfloat16)


def _bf16_in_interpreter(launch) -> bool:
    """A CPU launch that reads or writes bfloat16 beside a float A (operands, out=, output
    dtypes): the interpreter would compute it, truncating where the GPU rounds."""
    if launch.a.device.type != "cpu":
        return False
    tensors = [launch.b, launch.out, *launch.values.values(), *launch.a_pieces]
    dtypes = [t.dtype for t in tensors if isinstance(t, torch.Tensor)] + [o.dtype for o in launch.outputs]
    return torch.bfloat16 in dtypes


def default_backend(a: torch.Tensor) -> str:
    """The backend `backend="auto"` picks for a launch on `a`: Triton on the GPU or under the
    interpreter, the reference (eager PyTorch) elsewhere and for float64, which Triton does not
    compute in."""
    if a.dtype == torch.float64:
        return "reference"
    return "triton" if triton_runs_on(a) else "reference"


class Program:
    """A compiled epilogue: `prog(a, b, **operands)` returns a dict of output tensors.

    Built by `coda.compile(text)` or `@coda.epilogue`. The IR is checked and optimized once,
    here; kernels are generated and compiled at the first launch of each configuration.
    """

    def __init__(self, epi: Epilogue):
        self._derive(optimize(epi))

    def _derive(self, ir: Epilogue) -> None:
        """Hold the optimized IR and what launches read from it."""
        self.ir = ir
        self.widths = widths(self.ir)
        nodes = self.ir.nodes()
        self.has_unpack = any(n.op == "unpack" for n in nodes)
        self.rope_domains = {self.widths.nodes[n] for n in nodes if n.op == "rope"}
        self.rope_tables = {(n.args[1].arg, n.args[2].arg) for n in nodes if n.op == "rope"}
        self.probabilities = probability_operands(self.ir)
        self._triton = None
        self._plans: dict[tuple, object] = {}

    def __getstate__(self) -> dict:
        """What a copy or a pickle keeps: the optimized IR, flat (`Epilogue.__reduce__`: no
        recursion down a long chain of statements). The rest is derived from it again, and the
        compiled kernels and launch plans (generated modules, locks, device buffers) are built
        again at the copy's first launch."""
        return {"ir": self.ir}

    def __setstate__(self, state: dict) -> None:
        self._derive(state["ir"])

    @property
    def name(self) -> str:
        return self.ir.name

    @property
    def output_names(self) -> list[str]:
        return [o.name for o in self.ir.outputs]

    def __repr__(self) -> str:
        params = ", ".join(f"{p.name}: {p.kind or '?'}" for p in self.ir.params.values())
        return f"<coda.Program {self.name}({params}) -> {', '.join(self.output_names)}>"

    def __call__(self, a: torch.Tensor, b: torch.Tensor, /, *, backend: str = "auto",
                 out: torch.Tensor | None = None, out_dtype: torch.dtype | None = None,
                 seed: int | None = None, outputs: list[str] | None = None,
                 dtypes: dict[str, torch.dtype] | None = None, m_limit: torch.Tensor | None = None,
                 k_limit: torch.Tensor | None = None, a_col_sums: bool = False,
                 unfinished: list[str] | None = None, **operands) -> dict[str, torch.Tensor]:
        """Run `A @ B` and the epilogue; returns {output name: tensor}. An A with leading
        dimensions, [..., M, K], runs as one GEMM on its rows (`flatten_leading`). `outputs` selects
        which outputs to produce (default all): a cross-entropy can keep its row reductions
        and never write the logits. `dtypes` names the dtype an output is stored in.
        `m_limit` / `k_limit` (one-element integer tensors on the device) run the launch as if
        M / K were at most their value: the rows past it are neither computed nor written.
        `a_col_sums=True` adds "a_col_sums" [K], the sums of A's columns, taken from the tiles
        the K loop loads (the bias gradient of the layer whose output gradient A is).
        `unfinished` names row sums (or "a_col_sums") to return as `coda.Partials` (their
        tiles' partials, no finishing kernel), for a program that takes them as a row or column
        operand and adds them as it reads them (a norm's statistics)."""
        if b is None:   # a map's launch inside; here an unloaded weight would run as a map
            raise LaunchError("B must be a torch.Tensor, got None (to run the epilogue on a "
                              "tensor without a GEMM, use .map(x))")
        return self._launch(a, b, backend, out, out_dtype, seed, outputs, dtypes, operands,
                            (m_limit, k_limit), a_col_sums, unfinished)

    def map(self, x: torch.Tensor, /, *, backend: str = "auto", out: torch.Tensor | None = None,
            out_dtype: torch.dtype | None = None, seed: int | None = None,
            outputs: list[str] | None = None, dtypes: dict[str, torch.dtype] | None = None,
            m_limit: torch.Tensor | None = None, unfinished: list[str] | None = None,
            **operands) -> dict[str, torch.Tensor]:
        """Run the epilogue on an existing [M, N] tensor (`input` = x; or [..., M, N], as for a
        GEMM's A with leading dimensions), without a GEMM: for the
        element-wise and reduction steps whose input no GEMM produces (a norm's statistics of a
        model input, an activation's derivative applied to an incoming gradient). `m_limit` and
        `unfinished` as for a GEMM."""
        for option in ("k_limit", "a_col_sums"):
            if option in operands and option not in self.ir.params:
                raise LaunchError(f"{option}= is an option of a GEMM launch; a map has no K")
        return self._launch(x, None, backend, out, out_dtype, seed, outputs, dtypes, operands,
                            (m_limit, None), unfinished=unfinished)

    def _launch(self, a, b, backend, out, out_dtype, seed, outputs, dtypes, operands, limits,
                a_col_sums=False, unfinished=None) -> dict[str, torch.Tensor]:
        if isinstance(a, torch.Tensor) and a.dim() > 2:   # leading dimensions: one launch on rows
            lead, (rows, b, row_operands, out_rows) = flatten_leading(a, b, operands, out)
            outs = self._launch(rows, b, backend, out_rows, out_dtype, seed, outputs, dtypes, row_operands,
                                limits, a_col_sums, unfinished)
            outs = self._with_leading(outs, lead, a.shape[-2])
            return outs if out is None else outs | {"output": out}
        key = None
        first = a.pieces[0] if isinstance(a, Concat) else a
        if backend != "reference" and isinstance(first, torch.Tensor) and triton_runs_on(first):
            # The cached fast path: same shapes, strides, dtypes and alignment as a launch
            # that was validated before, so only the values outside this key are checked.
            # (options as bind takes them: a_col_sums=1 or outputs="s" must not find the plan of
            # a_col_sums=True or outputs=["s"], which bind would refuse)
            key = (backend, _meta(a), _meta(b), _meta(out), out_dtype, seed is None, _names(outputs),
                   None if dtypes is None else repr(dtypes), *map(_meta, limits),
                   a_col_sums if isinstance(a_col_sums, bool) else None, _names(unfinished),
                   *operands, *map(_meta, operands.values()),
                   # float32 GEMMs follow torch's float32 matmul precision (kernel.dot_precision)
                   first.dtype == torch.float32 and tf32_matmuls())
            try:
                plan = self._plans.get(key)
            except TypeError:   # an unhashable option (a list of lists): bind says what is wrong
                plan = key = None
            if plan is not None:
                if seed is not None or self.probabilities:
                    check_per_call(self.probabilities, operands, seed)
                if out is not None:
                    check_out_per_call(a, b, out, operands, plan.tile_operands)
                return plan.run(a, b, operands, out, seed_word(seed), limits)
        launch = bind(self, a, b, operands, out=out, out_dtype=out_dtype, seed=seed,
                      outputs=outputs, dtypes=dtypes, m_limit=limits[0], k_limit=limits[1],
                      a_col_sums=a_col_sums, unfinished=unfinished)
        # A's column sums come from the column tiles, and with N = 0 there are none: the
        # reference backend sums them (and launches no kernel the others would need), after the
        # Triton backend's refusals, which a launch with N > 0 would meet
        chosen = self._pick_backend(backend, launch)
        if chosen == "triton" and a_col_sums and launch.n == 0:
            from ..codegen.kernel import check_dtypes
            check_dtypes(launch)
        if chosen == "reference" or (a_col_sums and launch.n == 0):
            return run_reference(launch)
        plan, outputs = self.triton.start(launch)
        # a plan made while a CUDA graph is captured may run an untuned configuration (kernels
        # cannot be timed there: kernel.TritonProgram.config); the next launch makes its own
        if key is not None and not (first.is_cuda and torch.cuda.is_current_stream_capturing()):
            if len(self._plans) >= MAX_PLANS:   # shapes that keep changing: start over
                self._plans.clear()
            self._plans[key] = plan
        return outputs

    def _with_leading(self, outs: dict, lead: torch.Size, m: int) -> dict:
        """A flattened launch's outputs with A's leading dimensions back: tiles [..., M, N], row
        reductions [..., M]; column reductions (and Partials, over the flattened rows) as they are."""
        axes = {o.name: o.axis for o in self.ir.outputs}
        shaped = {}
        for name, t in outs.items():
            if isinstance(t, torch.Tensor) and name in axes and axes[name] != "col":
                t = t.reshape(*lead, m, *t.shape[1:])
            shaped[name] = t
        return shaped

    def reference(self, a: torch.Tensor, b: torch.Tensor, /, **kwargs) -> dict[str, torch.Tensor]:
        """The same launch on the reference backend (eager PyTorch): the ground truth."""
        return self(a, b, backend="reference", **kwargs)

    def bind(self, a: torch.Tensor, b: torch.Tensor | None, /, **kwargs) -> Launch:
        """Validate a launch without running it (what `__call__` does first); `backend=` is
        taken and has no say (every backend binds alike)."""
        kwargs.pop("backend", None)
        options = {k: kwargs.pop(k) for k in LAUNCH_OPTIONS if k in kwargs}
        if isinstance(a, torch.Tensor) and a.dim() > 2:   # the launch on A's rows
            _, (a, b, kwargs, out) = flatten_leading(a, b, kwargs, options.get("out"))
            if out is not None:
                options["out"] = out
        return bind(self, a, b, kwargs, **options)

    @property
    def triton(self):
        """The Triton backend of this program (kernels generated on first use)."""
        if self._triton is None:
            from ..codegen.kernel import TritonProgram
            self._triton = TritonProgram(self)
        return self._triton

    def explain(self, a: torch.Tensor | None = None, b: torch.Tensor | None = None, /, **kwargs) -> str:
        """The IR after passes, operand kinds and outputs; with example tensors also the
        generated Triton kernel and the configuration it would launch with."""
        lines = ["# IR after passes", format_epilogue(self.ir), "", "# outputs"]
        for o in self.ir.outputs:
            width = COLUMNS[self.widths.outputs[o.name]]
            shape = {None: f"[M, {width}]", "row": "[M]", "col": f"[{width}]"}[o.axis]
            lines.append(f"  {o.name}: {o.reduction or 'tile'} {shape}")
        if a is None and kwargs:
            given = ", ".join(f"{name}=" for name in kwargs)
            raise LaunchError(f"explain({given}) without example tensors: pass A (and B) first, by "
                              f"position (`prog.explain(a, b, bias=bias)`), then the operands by name")
        if a is not None:
            launch = self.bind(a, b, **kwargs)
            lines += ["", "# operand kinds"]
            lines += [f"  {name}: {kind}" for name, kind in launch.kinds.items()]
            lines += ["", self.triton.explain(launch)]
        return "\n".join(lines)

    def _pick_backend(self, backend: str, launch) -> str:
        if backend not in BACKENDS:
            raise LaunchError(f"backend must be one of {', '.join(BACKENDS)}; got {backend!r}")
        a, bf16 = launch.a, _bf16_in_interpreter(launch)
        if backend == "auto":
            return "reference" if bf16 else default_backend(a)
        if backend == "triton" and (bf16 or not triton_runs_on(a)):
            bf16 = (", in bfloat16 (not supported by the interpreter)" if a.dtype == torch.bfloat16 else
                    "; it would read or write bfloat16, which the interpreter does not support"
                    if bf16 else "")
            raise LaunchError(f"backend='triton' needs CUDA tensors, or CPU tensors with "
                              f"TRITON_INTERPRET=1 to run the kernels on the CPU; A is on {a.device}{bf16}")
        return backend
