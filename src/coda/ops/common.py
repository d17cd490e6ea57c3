"""Pieces every op shares: flattening to rows, the plain GEMM, weight gradients, autocast.

Every GEMM that carries an epilogue is a CODA program (the library eats its own cooking). A GEMM
with none (`matmul`, `weight_grad`) is cuBLAS's job: torch.matmul is as fast or faster there
(CODA's plain GEMM runs at 0.96x cuBLAS's speed on the H200, docs/performance.md) and launches
with less host time. PLAIN and ACCUMULATE remain for what torch.matmul cannot do in one
kernel: a float32 result of bf16 operands, `+=` into a float32 accumulator, a last `+` of that
accumulator rounded once to bf16, strided `out=`.
"""

from __future__ import annotations

import functools
import inspect
import math
import threading
from collections.abc import Callable, Sequence

import torch

from .. import compile as compile_program
from ..errors import CodaError, LaunchError
from ..runtime.binding import Concat, check_strided

PLAIN = compile_program("EPILOGUE plain() { output = input; }")
ACCUMULATE = compile_program("EPILOGUE accumulate() { output += input; }")
# A GEMM plus a float32 partial result of the same sum, rounded once to the output's dtype.
ADD_PARTIAL = compile_program("EPILOGUE add_partial(partial: tile) { output = input + partial; }")
# Row and column sums of a tensor (a map launched with outputs= naming the sums it needs).
SUMS = compile_program("EPILOGUE sums() { output = input; rows = row_sum(input); cols = col_sum(input); }")
# Each row times a number (the row operand c).
SCALE_ROWS = compile_program("EPILOGUE scale_rows(c: row) { output = input * c; }")
#: The DSL function that rounds a float32 value as storing it in a 16-bit dtype does (none for
#: float32 and float64: their stores keep what the epilogue computed).
ROUNDING: dict[torch.dtype, str] = {torch.bfloat16: "round_bf16", torch.float16: "round_fp16"}


def as_stored(y: str, dtype: torch.dtype) -> str:
    """The DSL expression `y` rounded as an output of `dtype` stores it, for an epilogue whose
    row sums feed the next norm: that norm normalizes the stored values, so its statistics must
    sum those, not the float32 ones (the difference, Σ 2 y δ for rounding errors δ, is not small
    against the variance where a row's mean or a few channels dominate: docs/ops.md)."""
    return f"{ROUNDING[dtype]}({y})" if dtype in ROUNDING else y


#: stats= of out_proj_residual and mlp -> the row sums of the output their epilogue stores
STATS: dict[str | None, list[str]] = {None: [], "rms": ["ss"], "layer": ["ss", "s"]}


def with_stats(ctx: object, y: torch.Tensor, outs: dict[str, torch.Tensor], stats: str | None,
               lead: torch.Size) -> torch.Tensor | tuple[torch.Tensor, ...]:
    """A forward's result: `y`, then the row statistics `stats` asks for (STATS), shaped like
    y's leading dimensions and not differentiable (they feed the next norm, not the loss)."""
    sums = [outs[name].reshape(lead) for name in STATS[stats]]
    ctx.mark_non_differentiable(*sums)
    return (y, *sums) if sums else y


def op_function(cls: type[torch.autograd.Function]) -> type[torch.autograd.Function]:
    """Class decorator for an op's autograd.Function. Its forward's outputs are its own tensors
    (a reshaped view of a buffer the forward made is detached from it, as torch's ops' outputs
    are not views), so a caller may change them in place. Its backward's programs have no
    derivative of their own: asked to build a graph for a second derivative (`create_graph=True`,
    which runs it with grad mode on) it raises a CodaError, where a graph of its eager parts
    would give a wrong second derivative; the usual backward pays one check."""
    forward, backward = cls.forward, cls.backward

    @functools.wraps(forward)
    def owned(ctx, *args):
        out = forward(ctx, *args)
        if not isinstance(out, tuple):
            return _own(out, args)
        outs = tuple(_own(t, args) for t in out)
        marked = getattr(ctx, "non_differentiable", ())   # ctx.mark_non_differentiable's
        if marked:
            ctx.mark_non_differentiable(*(new for old, new in zip(out, outs, strict=True)
                                          if any(old is t for t in marked)))
        return outs

    cls.forward, cls.backward = staticmethod(owned), staticmethod(differentiable_once(cls.__name__, backward))
    return cls


def differentiable_once(name: str, backward: Callable) -> Callable:
    """`backward(ctx, *grads)` refusing to run in grad mode, where autograd would build a graph of
    it for a second derivative (`create_graph=True`): the op's own autograd.Function's backward,
    and its custom op's autograd formula (coda.integrations.compile), whose backward op has no
    formula either."""
    @functools.wraps(backward)
    def first_order(ctx, *grads):
        if torch.is_grad_enabled():
            raise CodaError(f"{name}: CODA's ops are differentiable once; a second derivative (a "
                            f"backward with create_graph=True) is not supported")
        return backward(ctx, *grads)
    return first_order


def _own(out: object, inputs: tuple) -> object:
    """`out`, detached from the buffer it is a view of, unless that is an input's memory (a view
    of an input stays a view, which autograd tracks)."""
    if not isinstance(out, torch.Tensor) or not out._is_view():
        return out
    base = out._base
    if any(base is a or (isinstance(a, torch.Tensor) and base is a._base) for a in inputs):
        return out
    return out.detach()


def follows_autocast(*keep: str, widest: bool = False) -> Callable[[Callable], Callable]:
    """An op's entry point that runs, inside a `torch.autocast` region, as the region would run
    it: a GEMM's floating tensor arguments (all but `keep`, float32 statistics such as a
    producer's row sums, and float64 ones, which autocast leaves too) are cast to the region's
    dtype (float16 ones to a bfloat16 region's too); with `widest` (a norm, which autocast runs in
    float32) its 16-bit ones to float32. The op then runs with autocast off, its kernels
    computing in their inputs' dtype. The casts are autograd's: float32 parameters receive
    float32 gradients. Outside autocast the op is called as it is.

    The parameter names are read once, here: under torch.compile, `inspect.Signature.bind` at
    each call reads a mappingproxy, which Dynamo refuses once the traced code has changed any
    dict (an HF model's forward does), a graph break and a failed `fullgraph=True`."""
    def wrap(op: Callable) -> Callable:
        names = tuple(inspect.signature(op).parameters)   # the ops take no *args or **kwargs

        @functools.wraps(op)
        def run(*args, **kwargs):
            device = next((v.device.type for v in (*args, *kwargs.values()) if isinstance(v, torch.Tensor)),
                          None)
            if device not in ("cuda", "cpu") or not torch.is_autocast_enabled(device):
                return op(*args, **kwargs)
            # as autocast casts: every floating dtype but float64 that is not the target's
            target = torch.float32 if widest else torch.get_autocast_dtype(device)
            source = {torch.float32, torch.float16, torch.bfloat16} - {target}

            def cast(name: str, value: object) -> object:
                if name not in keep and isinstance(value, torch.Tensor) and value.dtype in source:
                    return value.to(target)
                return value
            # (positional arguments past the parameters are passed on: the op refuses the call)
            args = tuple(cast(name, v) for name, v in zip(names, args, strict=False)) + args[len(names):]
            kwargs = {name: cast(name, v) for name, v in kwargs.items()}
            with torch.autocast(device, enabled=False):
                return op(*args, **kwargs)
        return run
    return wrap


def present(**operands: object) -> dict[str, object]:
    """The launch operands that are given: None marks one that this variant does not declare."""
    return {name: value for name, value in operands.items() if value is not None}


def stored(**dtypes: torch.dtype | None) -> dict[str, torch.dtype] | None:
    """The `dtypes=` of a launch: each named output stored in its dtype (None: the default). A
    parameter's gradient summed by the launch is stored in the parameter's dtype, with no cast
    kernel after it."""
    return {name: dtype for name, dtype in dtypes.items() if dtype is not None} or None


def column_sum(t: torch.Tensor | Concat, dtype: torch.dtype | None = None) -> torch.Tensor:
    """The sum over the rows of t [M, N] -> [N], summed in float32 and stored in `dtype`
    (default float32; float64 for float64): one map reading t (a Concat's pieces where they
    lie), which writes nothing else (a bias gradient)."""
    return SUMS.map(t, outputs=["cols"], dtypes=stored(cols=dtype))["cols"]


# -- column sums a gradient's producer formed while it wrote the gradient -------------------------
#: each thread's notes (`noted_sums`)
_NOTES = threading.local()
#: Notes kept: a producer's note is read by the next op back, so two cover it; an unread one
#: holds its gradient only until two newer notes push it out.
NOTES_KEPT = 2


def noted_sums() -> list[tuple[torch.Tensor, int, torch.Tensor]]:
    """This thread's notes, (gradient, its version then, its column sums), newest last (see
    `note_column_sums`). Per thread: autograd runs each device's backward on a thread of its own,
    on several GPUs at once under nn.DataParallel, and a note is read in the backward that made
    it; one list for all had each thread's notes push out the other's and could delete past its
    end (an audit's find, seventy-first session)."""
    if not hasattr(_NOTES, "sums"):
        _NOTES.sums = []
    return _NOTES.sums


def notes_from(ctx: object, x: torch.Tensor) -> bool:
    """Whether a backward with this `ctx` may note the column sums of x's gradient: only when
    autograd itself runs it (inside torch.compile's custom ops, a stand-in ctx, the graph may
    hand a buffer on under the same tensor object with other values, which no version counts)
    and only when an op produced x (its backward may take the sums). A leaf's gradient goes to
    its `.grad`, and a note, which holds the gradient, would make autograd store a copy there
    (12.5 us at GPT-2's [16384, 768] on the H200, fifty-third session)."""
    return isinstance(ctx, torch.autograd.function.FunctionCtx) and x.grad_fn is not None


def note_column_sums(grad: torch.Tensor, sums: torch.Tensor) -> None:
    """Record that `sums` ([N]) are the column sums of `grad` ([..., N]), summed by the kernel
    that wrote it (LayerNorm's one-pass backward, `sum_dx=`, in the norm's parameter dtype: a
    model's biases have it). The op whose output `grad` is the gradient of then takes its bias
    gradient from them (`known_column_sums`) instead of summing `grad` again in its GEMM or a
    map. The note holds `grad`, so autograd never adds another gradient into it in place, and
    its version: any in-place change voids it."""
    notes = noted_sums()
    notes.append((grad, grad._version, sums))
    del notes[:-NOTES_KEPT]


def known_column_sums(grad: torch.Tensor, dtype: torch.dtype) -> torch.Tensor | None:
    """The column sums noted for this very tensor (not a view or a copy of it), unchanged since
    and stored in `dtype` (the bias gradient's: no cast, and never from a narrower dtype), or
    None. A note is read once: it is dropped here."""
    notes = noted_sums()
    for i, (noted, version, sums) in enumerate(notes):
        if noted is grad:
            del notes[i]
            return sums if grad._version == version and sums.dtype == dtype else None
    return None


# -- a GEMM's output returned in column blocks (`split=`): q, k and v of one q/k/v projection --
def check_split(op: str, split: Sequence[int] | None, n: int) -> tuple[int, ...] | None:
    """`split=`: None, or positive column widths that add up to the output's N."""
    if split is None:
        return None
    widths = tuple(split) if isinstance(split, (list, tuple)) else None
    if (not widths or not all(isinstance(w, int) and not isinstance(w, bool) and w > 0 for w in widths)
            or sum(widths) != n):
        raise LaunchError(f"{op}: split must be a list of positive column widths adding up to N = {n}, "
                          f"got {split!r}")
    return widths


def split_columns(y: torch.Tensor, widths: tuple[int, ...] | None) -> tuple[torch.Tensor, ...]:
    """y [..., N] as views of its column blocks (y alone without widths)."""
    return (y,) if widths is None else y.split(widths, dim=-1)


def joined_grad(grads: Sequence[torch.Tensor | None], widths: tuple[int, ...] | None, rows: int,
                like: torch.Tensor) -> torch.Tensor | Concat | None:
    """The gradient of a GEMM's output from the gradients of its column blocks (`split=`), as
    rows [M, N]: one tensor, or a Concat of the blocks' gradients that the backward GEMMs read
    where cuDNN's attention left them (no torch.cat of q, k and v's gradients). A block whose
    output was not used gets zeros; None when none was."""
    if all(g is None for g in grads):
        return None
    if widths is None:
        return grads[0].reshape(rows, grads[0].shape[-1])
    return Concat(tuple(like.new_zeros(rows, w) if g is None else g.reshape(rows, w)
                        for g, w in zip(grads, widths, strict=True)), 1)


def as_rows(x: torch.Tensor, name: str = "x") -> tuple[torch.Tensor, torch.Size]:
    """`x` as [rows, features] (a view when possible) and its leading shape, to restore later."""
    check_strided(name, x)
    return x.reshape(math.prod(x.shape[:-1]), x.shape[-1]), x.shape[:-1]   # -1: ambiguous when empty


_DEVICE_CONSTANTS: dict[tuple, torch.Tensor] = {}


def device_constant(key: tuple, make: Callable[[], torch.Tensor]) -> torch.Tensor:
    """The tensor `make()` gives, made once per `key` (which names its device) and kept for
    reuse; its users never write it. Not kept when first made inside a CUDA-graph capture (the
    kernel that fills it runs only when the graph replays, in the graph's memory pool, so eager
    launches after it would read garbage), nor when it is no plain tensor (a FakeTensor of a
    shape-propagating run, a tracer's wrapper: real runs after it would read no values)."""
    value = _DEVICE_CONSTANTS.get(key)
    if value is None:
        value = make()
        if type(value) is torch.Tensor and not (torch.cuda.is_available()
                                                and torch.cuda.is_current_stream_capturing()):
            _DEVICE_CONSTANTS[key] = value
    return value


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """`a @ b` (any strides: pass `w.T` for an nn.Linear weight)."""
    return torch.matmul(a, b)


def input_grad(dpre: torch.Tensor, w: torch.Tensor, dres: torch.Tensor | None = None) -> torch.Tensor:
    """`dpre @ w` ([M, N] @ [N, K]), the gradient of a linear layer's input, plus `dres` (x's
    other gradient, [..., K]: a residual's) in the GEMM's epilogue, where autograd would add
    the two in a third kernel (cuBLAS without dres, as `matmul`)."""
    if dres is None:
        return matmul(dpre, w)
    return ADD_PARTIAL(dpre, w, partial=as_rows(dres)[0])["output"]


#: From this K (the width of dpre, the gradient at a bias) on, a layer's dx GEMM leaves the bias
#: gradient to a column-sum map: the CODA GEMM that sums dpre's columns from its K loop is the
#: ping-pong kernel (the Triton one reads A twice for them), whose 128x128 mainloop falls behind
#: cuBLAS's at long K. layer_norm_linear's dx at LLaMA-7B size, 8192x4096x12288: 1195 us against
#: cuBLAS's 991 and 80 for the sums (H100, fifty-third session); this way 1018 + 73 (fifty-fourth).
#: At GPT-2's and BERT's K (768 to 3072) the one kernel is ahead.
SUMS_IN_GEMM_MAX_K = 4096


def sums_in_gemm(dpre: torch.Tensor) -> bool:
    """Whether dx's GEMM over dpre [M, K] should also sum dpre's columns (`a_col_sums=True`)."""
    return dpre.shape[-1] < SUMS_IN_GEMM_MAX_K


def input_and_bias_grad(dpre: torch.Tensor, w: torch.Tensor, need_x: bool, bias_dtype: torch.dtype | None,
                        sums: torch.Tensor | None = None) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """(dx, db) of a linear layer from dpre, the gradient at its bias: dx = dpre @ w (None unless
    `need_x`) and db = the column sums of dpre stored in `bias_dtype` (None when that is None).
    With both wanted, one CODA GEMM sums dpre's columns from the tiles its K loop loads
    (`a_col_sums=True`), where a separate map would read dpre once more (below
    SUMS_IN_GEMM_MAX_K); given `sums` (dpre's column sums in `bias_dtype`, `known_column_sums`)
    db is those and dx cuBLAS's GEMM."""
    if sums is not None:
        return matmul(dpre, w) if need_x else None, sums
    if need_x and bias_dtype is not None and sums_in_gemm(dpre):
        outs = PLAIN(dpre, w, a_col_sums=True, dtypes=stored(a_col_sums=bias_dtype))
        return outs["output"], outs["a_col_sums"]
    return (matmul(dpre, w) if need_x else None,
            None if bias_dtype is None else column_sum(dpre, bias_dtype))


def transposed(w: torch.Tensor) -> bool:
    """Whether a weight [N, K] is the transpose of a contiguous tensor (HF's Conv1D stores
    [in, out] and passes `weight.T`)."""
    return w.stride(0) == 1 and w.stride(1) != 1


def weight_grad_out(w: torch.Tensor) -> torch.Tensor | None:
    """The `out=` of an epilogue that forms the gradient of weight `w`: for a transposed weight a
    buffer laid out as `w`, so that the parameter receives a contiguous gradient (autograd copies
    a transposed one into the parameter's layout: GPT-2's c_attn, 12 copies and 0.17 ms a step on
    the H200, measured); None (the launch allocates it) otherwise."""
    return torch.empty_like(w) if transposed(w) else None


def weight_grad(dy: torch.Tensor, x: torch.Tensor, into: torch.Tensor | None = None,
                like: torch.Tensor | None = None) -> torch.Tensor:
    """`dy.T @ x` ([N, M] @ [M, K] = [N, K]), the gradient of an nn.Linear weight; with `into`
    (a [N, K] buffer of the output dtype, e.g. an existing `.grad`) it is accumulated there, in
    one GEMM (beta = 1). With `like` (the weight) a transposed weight (HF's Conv1D stores
    [in, out] and passes `weight.T`) gets its gradient as `(x.T @ dy).T`: the parameter then
    receives a contiguous gradient, where autograd would copy a transposed one."""
    if into is None:
        if like is not None and transposed(like):
            return torch.matmul(x.T, dy).T
        return torch.matmul(dy.T, x)
    if into.dtype == dy.dtype:
        return into.addmm_(dy.T, x)
    from ..integrations.compile import routed  # here: that module imports this one
    if routed():   # torch.compile traces it (a CODA launch would break its graph): torch's ops
        return into.addmm_(dy.T.to(into.dtype), x.to(into.dtype))
    return ACCUMULATE(dy.T, x, out=into)["output"]   # e.g. a float32 .grad of bf16 activations
