"""coda.ops inside `torch.compile` graphs: every op, forward and backward, as a custom op.

Dynamo cannot trace a CODA launch (Python-side plan caches, Triton launches), so an op it met as
a plain `torch.autograd.Function` would break the graph. Importing this module registers the ops
as `torch.library` custom ops in the `coda` namespace:

    forward                      backward (called by the forward's `register_autograd` formula)
    coda::linear                 coda::linear_backward
    coda::mlp                    coda::mlp_backward
    coda::dropout                coda::dropout itself, with the same seed (dropout is self-adjoint)
    coda::gated_mlp              coda::gated_mlp_backward        (swiglu_mlp and geglu_mlp)
    coda::qkv_rope               coda::qkv_rope_backward
    coda::rope                   coda::rope itself, with -sin (the inverse rotation)
    coda::linear_cross_entropy   coda::linear_cross_entropy_backward
    coda::linear_cross_entropy_with_grads   (its backward: plain torch)
    coda::rms_norm_linear        coda::rms_norm_linear_backward
    coda::layer_norm_linear      coda::layer_norm_linear_backward
    coda::out_proj_residual      coda::out_proj_residual_backward
    coda::rms_rstd               coda::rms_rstd_backward
    coda::interleave_gain        coda::interleave_gain_backward  (interleave with a gain)
    coda::layer_norm             coda::layer_norm_backward       (coda.nn.layer_norm)
    coda::rms_norm               coda::rms_norm_backward         (coda.nn.rms_norm)

Dynamo and AOTAutograd see each as one opaque node, in the forward graph and in the backward
graph: neither has a break. A fake kernel gives the outputs' shapes, dtypes and (contiguous)
strides; the real kernel runs the op's autograd.Function `forward` or `backward` unchanged, with
`_Ctx` standing in for autograd's ctx. The math lives in coda.ops only.

Routing. `coda.ops.linear` & co. take the custom ops while torch.compile traces
(`torch.compiler.is_compiling()`) and their autograd.Functions otherwise, so eager code pays
nothing (the custom-op dispatch costs tens of microseconds per call: docs/integrations.md). The
functions of the same names here (`linear`, `mlp`, ..., same signatures) take the custom ops in
eager mode too, as does any coda.ops call inside `with custom_ops():` (e.g. to run a model on
FakeTensors or meta tensors).

What each forward op returns. A custom op may not return its inputs, views of them, or two views
of one tensor, nor None in place of a tensor. So each forward op returns its result plus the
intermediates its backward needs (the activation's slope f'(pre), h, the log-sum-exp, ...), marked
non-differentiable; the tensors that are inputs are saved by `setup_context`; a tensor a variant
lacks is an empty placeholder (so the norms return their row sums only when they computed them;
given `sumsq` / `rowsum` are saved as inputs instead). out_proj_residual always returns y, ss and s
(empty where `stats` omits them); rms_rstd's backward op recomputes the float rstd from ss rather
than return a second output that could alias the first. qkv_rope returns its one [..., N]
buffer: q, k and v are views of it taken outside the op (as in coda.ops), and autograd hands the
backward op one [..., N] gradient, assembled from dq, dk and dv by the split's backward (one copy
that coda.ops avoids).

Seeds. With `seed=None` the eager ops draw an int from torch's CPU generator (`.item()`). In a
graph that would be a break, or, drawn at trace time, a constant baked into the graph: every step
would reuse one dropout mask. Here the seed is a tensor input of the op: `seed=None` becomes
`torch.randint(2**31, (), device="cpu")` inside the graph, drawn at each run from torch's CPU
generator (so `torch.manual_seed` makes compiled runs repeatable; the aot_eager backend draws
exactly the seeds eager mode draws, Inductor its own from the same generator). The op reads it
with `.item()` (a CPU scalar: no device synchronization) and `setup_context` saves it, so the
backward regenerates the forward's mask. An int seed becomes `torch.tensor(seed)`; Dynamo guards
on its value (a second value recompiles once, then the int is a dynamic input).
"""

import contextlib
import contextvars
import functools
import math
from collections.abc import Callable, Iterator, Sequence

import torch
from torch import Tensor

from .. import ops
from ..errors import CodaError
from ..nn.layer_norm import NormFunction
from ..nn.layer_norm import layer_norm as _nn_layer_norm
from ..nn.layer_norm import rms_norm as _nn_rms_norm
from ..ops.common import STATS, as_rows, differentiable_once
from ..ops.cross_entropy import LinearCrossEntropyFunction
from ..ops.dropout import DropoutFunction, resolve_seed
from ..ops.gated_mlp import GatedMLPFunction, InterleaveGain, row_scale
from ..ops.linear import ACTIVATIONS, LinearFunction, MLPFunction
from ..ops.norms import (
    LayerNormLinearFunction,
    OutProjResidualFunction,
    RMSNormLinearFunction,
    RmsRstd,
)
from ..ops.rope import QKVRopeFunction, rotate, split_heads

_FORCED = contextvars.ContextVar("coda_custom_ops", default=False)


def routed() -> bool:
    """Whether coda.ops calls go through the custom ops: while torch.compile traces them, or
    inside `custom_ops()`."""
    return torch.compiler.is_compiling() or _FORCED.get()


@contextlib.contextmanager
def custom_ops(enabled: bool = True) -> Iterator[None]:
    """Route coda.ops calls through the custom ops (or not) in eager mode too, within the block."""
    token = _FORCED.set(enabled)
    try:
        yield
    finally:
        _FORCED.reset(token)


#: The qualified names of coda's custom ops ("coda::linear", ...), in definition order.
OP_NAMES: list[str] = []


def _custom_op(name: str) -> Callable:
    """`torch.library.custom_op(name)`, recorded in OP_NAMES (none of the ops mutates its inputs).
    Its kernel runs with grad mode off: an opaque op records no graph of what it runs inside,
    and the ops' backward refuses to run under grad mode (`op_function`), which PyTorch's
    checks of a custom op (`opcheck`) switch on."""
    OP_NAMES.append(name)
    define = torch.library.custom_op(name, mutates_args=())

    def register(kernel: Callable) -> Callable:
        @functools.wraps(kernel)
        def without_grad(*args, **kwargs):
            with torch.no_grad():
                return kernel(*args, **kwargs)
        op = define(without_grad)
        op.register_vmap(functools.partial(_refuse_vmap, name))
        return op
    return register


def _refuse_vmap(name: str, *_) -> None:
    """The ops' rule under `torch.func.vmap`: a refusal, as their autograd.Functions refuse it
    (docs/ops.md, "Not for torch.func"). Without one vmap ran the op per batch, but a batched
    tensor reads `requires_grad=False` there, so the forward kept nothing for the backward, which
    then failed inside CODA."""
    raise CodaError(f"{name} does not run under torch.func.vmap (nor do CODA's other ops): call it "
                    f"on the whole batch, whose leading dimensions it takes as rows")


def _first_order(grad: Callable) -> Callable:
    """An op's autograd formula that refuses a second derivative as its autograd.Function does
    (named by the op: `_linear_grad` as "linear")."""
    return differentiable_once(grad.__name__.strip("_").removesuffix("_grad"), grad)


def _register_fake(op) -> Callable:
    """`op.register_fake`, the fake kernel first giving Inductor its fallbacks (below)."""
    def register(fake: Callable) -> Callable:
        @functools.wraps(fake)
        def with_fallbacks(*args, **kwargs):
            inductor_fallbacks()
            return fake(*args, **kwargs)
        return op.register_fake(with_fallbacks)
    return register


@functools.cache
def inductor_fallbacks() -> None:
    """Register every coda op with Inductor as a fallback kernel, the one it would make itself on
    meeting the op ("implicit fallback"), with the same layout constraint.

    Why: PyTorch up to 2.11 formats the INFO message of each implicit fallback whether or not
    INFO is logged, printing every argument's IR, and the printing recurses through the whole
    unrealized graph behind it: for a CODA-patched BERT on the H200 it never finished (over
    300 s in `OperatorIssue.operator_str`, `benchmarks/results/session14/last/cc_diag.log`;
    later PyTorch formats it lazily). It runs from the fake kernels: after Dynamo has met a coda
    op, before Inductor lowers it. These are Inductor internals: where a PyTorch lacks them, it
    leaves the ops to the implicit path."""
    try:
        from torch._inductor.lowering import lowerings, make_fallback, tag_to_layout_constraint
        from torch._library.utils import get_layout_constraint_tag
    except ImportError:
        return
    for name in OP_NAMES:
        op = getattr(torch.ops.coda, name.split("::")[1]).default
        if op not in lowerings:
            constraint = tag_to_layout_constraint(get_layout_constraint_tag(op, with_default=True))
            make_fallback(op, layout_constraint=constraint, warn=False)


class _Ctx:
    """Stands in for autograd's ctx when an op's autograd.Function runs inside a custom op: its
    forward records what it saves; its backward finds the saved tensors, the gradients wanted and
    the attributes its forward set, rebuilt from the backward op's arguments."""

    def __init__(self, saved: tuple = (), needs: Sequence[bool] = (), **attributes: object):
        self.saved_tensors = saved
        # The Functions' later arguments (and tensors whose gradient is formed outside the op)
        # want no gradient.
        self.needs_input_grad = (*needs, *[False] * 8)
        self.__dict__.update(attributes)

    def save_for_backward(self, *tensors: Tensor | None) -> None:
        self.saved_tensors = tensors

    def mark_non_differentiable(self, *tensors: Tensor) -> None:
        """The setup_context of the custom op marks its outputs instead."""

    def set_materialize_grads(self, value: bool) -> None:
        """Gradients reach the Function's backward as the backward op got them."""


def _int(seed: Tensor | None) -> int | None:
    return None if seed is None else int(seed.item())


def _seed(p: float, seed: int | None) -> Tensor | None:
    """The dropout seed as a tensor input: None without dropout, drawn in the graph when None."""
    if p == 0.0:
        return None
    if seed is None:
        return torch.randint(2**31, (), device="cpu")
    # Only the low 32 bits key the mask (coda.runtime.rng.seed_word): any int fits an int64 so.
    return torch.tensor(resolve_seed(p, seed) % 2**32, device="cpu")


def _or_empty(t: Tensor | None, like: Tensor) -> Tensor:
    """A custom op's stand-in for None: an empty tensor."""
    return like.new_empty(0) if t is None else t


def _gradients(grads, like: Tensor) -> tuple[Tensor, ...]:
    """A backward op's gradients, contiguous as its fake declares them: the weight gradient of a
    transposed weight (HF's Conv1D) comes back transposed from `ops.common.weight_grad`, which
    spares eager autograd a copy; a compiled graph copies it here instead."""
    return tuple(_or_empty(g, like).contiguous() for g in grads)


def _with_sums(out: Tensor | tuple[Tensor, ...], x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(y, ss, s) of an op on x returning y, (y, ss) or (y, ss, s) by its `stats=`: a sum it did
    not form is an empty tensor of the sums' dtype, as the fake declares it (a distinct one each:
    a custom op's outputs must not alias)."""
    y, *sums = out if isinstance(out, tuple) else (out,)
    return y, *sums, *(x.new_empty(0, dtype=_stat_dtype(x)) for _ in range(2 - len(sums)))


def _as_returned(stats: str | None, y: Tensor, ss: Tensor, s: Tensor) -> Tensor | tuple[Tensor, ...]:
    """The inverse of `_with_sums`: y, (y, ss) or (y, ss, s), as the op returns them by `stats`."""
    return {None: y, "rms": (y, ss), "layer": (y, ss, s)}[stats]


def _sums_fake(x: Tensor, stats: str | None) -> tuple[Tensor, Tensor]:
    """The fake (ss, s) of `_with_sums`: [...] float32 rows for the sums `stats` names, else empty."""
    return tuple(x.new_empty(x.shape[:-1] if name in STATS[stats] else 0, dtype=_stat_dtype(x))
                 for name in ("ss", "s"))


def _wanted(grads: Sequence[Tensor], needs: Sequence[bool]) -> tuple[Tensor | None, ...]:
    return tuple(g if need else None for g, need in zip(grads, needs, strict=True))


def _rows(x: Tensor) -> int:
    return math.prod(x.shape[:-1])


def _stat_dtype(x: Tensor) -> torch.dtype:
    """The dtype of reductions (row statistics): float32, float64 for a float64 launch."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def _saves_slope(activation: str | None, grad: bool) -> bool:
    """Whether linear / mlp keep the slope f'(pre) for the backward (LinearFunction's rule)."""
    return grad and ACTIVATIONS[activation][1] is not None


# linear ------------------------------------------------------------------------------------------
@_custom_op("coda::linear")
def _linear(x: Tensor, w: Tensor, bias: Tensor | None, activation: str | None, p: float,
            seed: Tensor | None, grad: bool) -> tuple[Tensor, Tensor]:
    """(y, slope): LinearFunction.forward; slope is empty unless the backward needs it."""
    ctx = _Ctx()
    y = LinearFunction.forward(ctx, x, w, bias, activation, p, _int(seed), grad)
    return y, _or_empty(ctx.saved_tensors[2], x)


@_register_fake(_linear)
def _linear_fake(x, w, bias, activation, p, seed, grad):
    slope = x.new_empty(_rows(x), w.shape[0]) if _saves_slope(activation, grad) else x.new_empty(0)
    return x.new_empty(*x.shape[:-1], w.shape[0]), slope


def _linear_setup(ctx, inputs, output):
    x, w, bias, activation, p, seed, _ = inputs
    ctx.mark_non_differentiable(output[1])
    ctx.set_materialize_grads(False)
    ctx.save_for_backward(x, w, output[1], seed)
    ctx.activation, ctx.p = activation, p
    ctx.bias_dtype = None if bias is None else bias.dtype


def _linear_grad(ctx, dy, _):
    x, w, slope, seed = ctx.saved_tensors
    needs = ctx.needs_input_grad[:3]
    grads = torch.ops.coda.linear_backward(dy, x, w, slope, ctx.activation, ctx.p, seed, needs,
                                           ctx.bias_dtype)
    return *_wanted(grads, needs), None, None, None, None


_linear.register_autograd(_first_order(_linear_grad), setup_context=_linear_setup)


@_custom_op("coda::linear_backward")
def _linear_backward(dy: Tensor, x: Tensor, w: Tensor, slope: Tensor, activation: str | None,
                     p: float, seed: Tensor | None, needs: list[bool], bias_dtype: torch.dtype | None
                     ) -> tuple[Tensor, Tensor, Tensor]:
    """(dx, dw, db): LinearFunction.backward; empty where `needs` is False."""
    ctx = _Ctx((x, w, slope if _saves_slope(activation, True) else None), needs, activation=activation,
               p=p, seed=_int(seed), bias_dtype=bias_dtype)
    return _gradients(LinearFunction.backward(ctx, dy)[:3], x)


@_register_fake(_linear_backward)
def _linear_backward_fake(dy, x, w, slope, activation, p, seed, needs, bias_dtype):
    need_x, need_w, need_b = needs
    return (x.new_empty(x.shape) if need_x else x.new_empty(0),
            w.new_empty(w.shape) if need_w else x.new_empty(0),
            x.new_empty(w.shape[0], dtype=bias_dtype) if need_b else x.new_empty(0))


def linear_op(x: Tensor, w: Tensor, bias: Tensor | None, activation: str | None, p: float,
              seed: int | None, grad: bool) -> Tensor:
    """coda.ops.linear's launch (checked arguments, the caller's seed) through coda::linear."""
    return torch.ops.coda.linear(x, w, bias, activation, p, _seed(p, seed), grad)[0]


# mlp ---------------------------------------------------------------------------------------------
@_custom_op("coda::mlp")
def _mlp(x: Tensor, w1: Tensor, b1: Tensor | None, w2: Tensor, b2: Tensor | None,
         activation: str | None, p: float, seed: Tensor | None, residual: Tensor | None, grad: bool,
         stats: str | None, residual_is_x: bool) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """(y, slope, h, ss, s): MLPFunction.forward; slope is empty unless the backward needs it, ss
    and s unless `stats` asks for them."""
    ctx = _Ctx()
    out = MLPFunction.forward(ctx, x, w1, b1, w2, b2, activation, p, _int(seed), residual, grad, stats)
    y, ss, s = _with_sums(out, x)
    slope, h = ctx.saved_tensors[3:]
    return y, _or_empty(slope, x), h, ss, s


@_register_fake(_mlp)
def _mlp_fake(x, w1, b1, w2, b2, activation, p, seed, residual, grad, stats, residual_is_x):
    h = x.new_empty(_rows(x), w1.shape[0])
    slope = x.new_empty(h.shape) if _saves_slope(activation, grad) else x.new_empty(0)
    return x.new_empty(*x.shape[:-1], w2.shape[0]), slope, h, *_sums_fake(x, stats)


def _mlp_setup(ctx, inputs, output):
    x, w1, b1, w2, b2, activation, p, seed, _, _, _, residual_is_x = inputs
    ctx.mark_non_differentiable(*output[1:])
    ctx.set_materialize_grads(False)
    ctx.save_for_backward(x, w1, w2, *output[1:3], seed)
    ctx.activation, ctx.p, ctx.residual_is_x = activation, p, residual_is_x
    ctx.bias_dtypes = [None if b is None else b.dtype for b in (b1, b2)]


def _mlp_grad(ctx, dy, _slope, _h, _ss, _s):
    x, w1, w2, slope, h, seed = ctx.saved_tensors
    needs = ctx.needs_input_grad[:5]
    # with the residual x itself, dx includes the residual's gradient (MLPFunction)
    fold = ctx.residual_is_x and needs[0]
    grads = torch.ops.coda.mlp_backward(dy, x, w1, w2, slope, h, ctx.activation, ctx.p, seed, needs,
                                        *ctx.bias_dtypes, fold)
    dresidual = dy if ctx.needs_input_grad[8] and not fold else None   # outside the op: dy itself
    return *_wanted(grads, needs), None, None, None, dresidual, None, None, None


_mlp.register_autograd(_first_order(_mlp_grad), setup_context=_mlp_setup)


@_custom_op("coda::mlp_backward")
def _mlp_backward(dy: Tensor, x: Tensor, w1: Tensor, w2: Tensor, slope: Tensor, h: Tensor,
                  activation: str | None, p: float, seed: Tensor | None, needs: list[bool],
                  b1_dtype: torch.dtype | None, b2_dtype: torch.dtype | None, residual_is_x: bool
                  ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """(dx, dw1, db1, dw2, db2): MLPFunction.backward; empty where `needs` is False."""
    ctx = _Ctx((x, w1, w2, slope if _saves_slope(activation, True) else None, h), needs,
               activation=activation, p=p, seed=_int(seed), bias_dtypes=(b1_dtype, b2_dtype),
               residual_is_x=residual_is_x)
    return _gradients(MLPFunction.backward(ctx, dy)[:5], x)


@_register_fake(_mlp_backward)
def _mlp_backward_fake(dy, x, w1, w2, slope, h, activation, p, seed, needs, b1_dtype, b2_dtype,
                       residual_is_x):
    shapes = (x.shape, w1.shape, w1.shape[:1], w2.shape, w2.shape[:1])
    dtypes = (x.dtype, w1.dtype, b1_dtype, w2.dtype, b2_dtype)
    return tuple(x.new_empty(shape, dtype=dtype) if need else x.new_empty(0)
                 for shape, dtype, need in zip(shapes, dtypes, needs, strict=True))


def mlp_op(x: Tensor, w1: Tensor, b1: Tensor | None, w2: Tensor, b2: Tensor | None,
           activation: str | None, p: float, seed: int | None, residual: Tensor | None, grad: bool,
           stats: str | None) -> Tensor | tuple[Tensor, ...]:
    """coda.ops.mlp's launch (checked arguments, the caller's seed) through coda::mlp: y, (y, ss)
    or (y, ss, s) as the op returns them."""
    y, _, _, ss, s = torch.ops.coda.mlp(x, w1, b1, w2, b2, activation, p, _seed(p, seed), residual,
                                        grad, stats, residual is x)
    return _as_returned(stats, y, ss, s)


# dropout -----------------------------------------------------------------------------------------
@_custom_op("coda::dropout")
def _dropout(x: Tensor, p: float, seed: Tensor) -> Tensor:
    """DropoutFunction.forward. Its backward, the same map with the same seed, is this op too."""
    return DropoutFunction.forward(_Ctx(), x, p, _int(seed))


@_register_fake(_dropout)
def _dropout_fake(x, p, seed):
    return x.new_empty(x.shape)


def _dropout_setup(ctx, inputs, output):
    ctx.p, ctx.seed = inputs[1], inputs[2]


def _dropout_grad(ctx, dy):
    return torch.ops.coda.dropout(dy, ctx.p, ctx.seed), None, None


_dropout.register_autograd(_first_order(_dropout_grad), setup_context=_dropout_setup)


def dropout_op(x: Tensor, p: float, seed: int | None) -> Tensor:
    """coda.ops.dropout's launch (checked p, the caller's seed) through coda::dropout."""
    return x if p == 0.0 else torch.ops.coda.dropout(x, p, _seed(p, seed))


# gated MLPs --------------------------------------------------------------------------------------
@_custom_op("coda::gated_mlp")
def _gated_mlp(x: Tensor, w_gate_up: Tensor, w_down: Tensor, residual: Tensor | None,
               rstd: Tensor | None, activation: str, stats: bool, grad: bool, sumsq: Tensor | None,
               eps: float, residual_is_x: bool) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """(y, ss, gate, up, h): GatedMLPFunction.forward; ss is empty unless `stats`, gate and up
    unless `grad`."""
    ctx = _Ctx()
    out = GatedMLPFunction.forward(ctx, x, w_gate_up, w_down, residual, rstd, activation, stats, grad,
                                   sumsq, eps)
    y, ss = out if stats else (out, None)
    gate, up, h = ctx.saved_tensors[4:7]
    return y, _or_empty(ss, x), _or_empty(gate, x), _or_empty(up, x), h


@_register_fake(_gated_mlp)
def _gated_mlp_fake(x, w_gate_up, w_down, residual, rstd, activation, stats, grad, sumsq, eps,
                    residual_is_x):
    lead, width = x.shape[:-1], w_gate_up.shape[0] // 2
    ss = x.new_empty(lead, dtype=_stat_dtype(x)) if stats else x.new_empty(0)
    h = x.new_empty(_rows(x), width)
    gate, up = (x.new_empty(h.shape if grad else 0) for _ in range(2))
    return x.new_empty(*lead, w_down.shape[0]), ss, gate, up, h


def _gated_mlp_setup(ctx, inputs, output):
    x, w_gate_up, w_down, residual, rstd, activation, stats, _, sumsq, eps, residual_is_x = inputs
    y, ss, gate, up, h = output
    ctx.mark_non_differentiable(gate, up, h, *(() if stats else (ss,)))
    ctx.set_materialize_grads(False)
    ctx.save_for_backward(x, w_gate_up, w_down, rstd, sumsq, gate, up, h, y if stats else None)
    ctx.activation, ctx.eps, ctx.residual_is_x = activation, eps, residual_is_x
    ctx.residual_dtype = None if residual is None else residual.dtype


def _gated_mlp_grad(ctx, dy, dss, _gate, _up, _h):
    needs = list(ctx.needs_input_grad[:5])
    # With the residual x itself, x's gradient includes the residual's (GatedMLPFunction);
    # otherwise, without dss, the residual's gradient is dy itself, which a custom op cannot return.
    residual_outside = needs[3] and dss is None and not (ctx.residual_is_x and needs[0])
    needs[3] = needs[3] and not residual_outside and not ctx.residual_is_x
    grads = torch.ops.coda.gated_mlp_backward(dy, dss, *ctx.saved_tensors, ctx.activation, needs,
                                              ctx.residual_dtype, ctx.eps, ctx.residual_is_x)
    dx, dw_gate_up, dw_down, dresidual, drstd = _wanted(grads, needs)
    if residual_outside:
        dresidual = dy.to(ctx.residual_dtype)
    return dx, dw_gate_up, dw_down, dresidual, drstd, None, None, None, None, None, None


_gated_mlp.register_autograd(_first_order(_gated_mlp_grad), setup_context=_gated_mlp_setup)


@_custom_op("coda::gated_mlp_backward")
def _gated_mlp_backward(dy: Tensor | None, dss: Tensor | None, x: Tensor, w_gate_up: Tensor,
                        w_down: Tensor, rstd: Tensor | None, sumsq: Tensor | None, gate: Tensor,
                        up: Tensor, h: Tensor, y: Tensor | None, activation: str, needs: list[bool],
                        residual_dtype: torch.dtype | None, eps: float, residual_is_x: bool
                        ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """(dx, dw_gate_up, dw_down, dresidual, drstd): GatedMLPFunction.backward; empty where
    `needs` is False."""
    ctx = _Ctx((x, w_gate_up, w_down, row_scale(rstd, sumsq), gate, up, h, y), needs,
               activation=activation, residual=((*x.shape[:-1], w_down.shape[0]), residual_dtype),
               rstd=None if rstd is None else (rstd.shape, rstd.dtype),
               eps=None if sumsq is None else eps, residual_is_x=residual_is_x)
    return _gradients(GatedMLPFunction.backward(ctx, dy, dss)[:5], x)


@_register_fake(_gated_mlp_backward)
def _gated_mlp_backward_fake(dy, dss, x, w_gate_up, w_down, rstd, sumsq, gate, up, h, y, activation,
                             needs, residual_dtype, eps, residual_is_x):
    shapes = (x.shape, w_gate_up.shape, w_down.shape, (*x.shape[:-1], w_down.shape[0]),
              x.shape[:-1])
    dtypes = (x.dtype, x.dtype, x.dtype, residual_dtype, None if rstd is None else rstd.dtype)
    return tuple(x.new_empty(shape, dtype=dtype) if need else x.new_empty(0)
                 for shape, dtype, need in zip(shapes, dtypes, needs, strict=True))


def gated_mlp_op(x: Tensor, w_gate_up: Tensor, w_down: Tensor, residual: Tensor | None,
                 rstd: Tensor | None, activation: str, stats: bool, grad: bool,
                 sumsq: Tensor | None, eps: float) -> Tensor | tuple[Tensor, Tensor]:
    """swiglu_mlp's / geglu_mlp's launch (checked arguments) through coda::gated_mlp."""
    y, ss, *_ = torch.ops.coda.gated_mlp(x, w_gate_up, w_down, residual, rstd, activation, stats, grad,
                                         sumsq, eps, residual is x)
    return (y, ss) if stats else y


# qkv_rope ----------------------------------------------------------------------------------------
@_custom_op("coda::qkv_rope")
def _qkv_rope(x: Tensor, w_qkv: Tensor, bias: Tensor | None, cos: Tensor, sin: Tensor,
              n_heads: int, n_kv_heads: int, head_dim: int) -> Tensor:
    """QKVRopeFunction.forward's one buffer [..., N], whose views are q, k and v."""
    q = QKVRopeFunction.forward(_Ctx(), x, w_qkv, bias, cos, sin, (n_heads, n_kv_heads, head_dim))[0]
    # q, k and v are the column blocks of one contiguous [M, N] buffer, q first: the whole buffer.
    n = w_qkv.shape[0]
    return q.as_strided((_rows(x), n), (n, 1)).view(*x.shape[:-1], n)


@_register_fake(_qkv_rope)
def _qkv_rope_fake(x, w_qkv, bias, cos, sin, n_heads, n_kv_heads, head_dim):
    return x.new_empty(*x.shape[:-1], w_qkv.shape[0])


def _qkv_rope_setup(ctx, inputs, output):
    x, w_qkv, bias, cos, sin, *heads = inputs
    ctx.save_for_backward(x, w_qkv, cos, sin)
    ctx.heads, ctx.bias_dtype = heads, None if bias is None else bias.dtype


def _qkv_rope_grad(ctx, dout):
    x, w_qkv, cos, sin = ctx.saved_tensors
    needs = ctx.needs_input_grad[:3]
    grads = torch.ops.coda.qkv_rope_backward(dout, x, w_qkv, cos, sin, *ctx.heads, needs,
                                             ctx.bias_dtype)
    return *_wanted(grads, needs), None, None, None, None, None


_qkv_rope.register_autograd(_first_order(_qkv_rope_grad), setup_context=_qkv_rope_setup)


@_custom_op("coda::qkv_rope_backward")
def _qkv_rope_backward(dout: Tensor, x: Tensor, w_qkv: Tensor, cos: Tensor, sin: Tensor,
                       n_heads: int, n_kv_heads: int, head_dim: int, needs: list[bool],
                       bias_dtype: torch.dtype | None) -> tuple[Tensor, Tensor, Tensor]:
    """(dx, dw_qkv, dbias): QKVRopeFunction.backward of dq, dk, dv (column blocks of dout);
    empty where `needs` is False."""
    ctx = _Ctx((x, w_qkv, cos, sin), needs, heads=(n_heads, n_kv_heads, head_dim),
               bias_dtype=bias_dtype)
    widths = (n_heads * head_dim, n_kv_heads * head_dim, n_kv_heads * head_dim)
    grads = QKVRopeFunction.backward(ctx, *dout.reshape(-1, w_qkv.shape[0]).split(widths, dim=1))
    return _gradients(grads[:3], x)


@_register_fake(_qkv_rope_backward)
def _qkv_rope_backward_fake(dout, x, w_qkv, cos, sin, n_heads, n_kv_heads, head_dim, needs,
                            bias_dtype):
    need_x, need_w, need_b = needs
    return (x.new_empty(x.shape) if need_x else x.new_empty(0),
            w_qkv.new_empty(w_qkv.shape) if need_w else x.new_empty(0),
            x.new_empty(w_qkv.shape[0], dtype=bias_dtype) if need_b else x.new_empty(0))


def qkv_rope_op(x: Tensor, w_qkv: Tensor, bias: Tensor | None, cos: Tensor, sin: Tensor,
                heads: tuple[int, int, int]) -> tuple[Tensor, Tensor, Tensor]:
    """qkv_rope's launch (checked arguments, [M, head_dim / 2] tables) through coda::qkv_rope:
    q, k and v are views of its output, as in coda.ops."""
    out = torch.ops.coda.qkv_rope(x, w_qkv, bias, cos, sin, *heads)
    return split_heads(out.view(-1, out.shape[-1]), x.shape[:-1], heads)


# rope --------------------------------------------------------------------------------------------
@_custom_op("coda::rope")
def _rope(x: Tensor, cos: Tensor, sin: Tensor, n_rot: int) -> Tensor:
    """coda.ops.rope's map. Its backward, the inverse rotation, is this op with -sin."""
    return rotate(x, cos, sin, n_rot)


@_register_fake(_rope)
def _rope_fake(x, cos, sin, n_rot):
    return x.new_empty(x.shape)


def _rope_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[1], inputs[2])
    ctx.n_rot = inputs[3]


def _rope_grad(ctx, dy):
    cos, sin = ctx.saved_tensors
    return torch.ops.coda.rope(dy, cos, -sin, ctx.n_rot), None, None, None


_rope.register_autograd(_first_order(_rope_grad), setup_context=_rope_setup)


def rope_op(x: Tensor, cos: Tensor, sin: Tensor, n_rot: int) -> Tensor:
    """coda.ops.rope's launch (checked arguments, [M, head_dim / 2] tables) through coda::rope."""
    return torch.ops.coda.rope(x, cos, sin, n_rot)


# linear_cross_entropy ----------------------------------------------------------------------------
@_custom_op("coda::linear_cross_entropy")
def _linear_cross_entropy(x: Tensor, w: Tensor, target: Tensor, bias: Tensor | None,
                          norm_weight: Tensor | None, ignore_index: int, reduction: str,
                          label_smoothing: float, softcap: float | None, chunk_size: int | None,
                          low_memory: bool, norm_eps: float
                          ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """(loss, a, target_f, lse, rstd, weight): LinearCrossEntropyFunction.forward; a (the GEMMs'
    normalized A operand) and rstd are empty without `norm_weight`."""
    ctx = _Ctx()
    loss = LinearCrossEntropyFunction.forward(ctx, x, w, target, bias, norm_weight, ignore_index,
                                              reduction, label_smoothing, softcap, chunk_size,
                                              low_memory, norm_eps, False)
    _, a, _, _, _, target_f, lse, rstd, weight = ctx.saved_tensors
    norm = norm_weight is not None
    return loss, a if norm else x.new_empty(0), target_f, lse, _or_empty(rstd, lse), weight


@_register_fake(_linear_cross_entropy)
def _linear_cross_entropy_fake(x, w, target, bias, norm_weight, ignore_index, reduction,
                               label_smoothing, softcap, chunk_size, low_memory, norm_eps):
    rows, stat, norm = _rows(x), _stat_dtype(x), norm_weight is not None
    loss = x.new_empty(x.shape[:-1] if reduction == "none" else (), dtype=stat)
    a = x.new_empty(rows, x.shape[-1]) if norm else x.new_empty(0)
    target_f, lse, rstd, weight = (x.new_empty(n, dtype=stat) for n in (rows, rows, rows * norm, rows))
    return loss, a, target_f, lse, rstd, weight


def _linear_cross_entropy_setup(ctx, inputs, output):
    x, w, _, bias, norm_weight = inputs[:5]
    ctx.mark_non_differentiable(*output[1:])
    ctx.set_materialize_grads(False)
    ctx.save_for_backward(x, w, bias, norm_weight, *output[1:])
    ctx.options = inputs[7:11]   # label_smoothing, softcap, chunk_size, low_memory


def _linear_cross_entropy_grad(ctx, grad, *_):
    x, w, bias, norm_weight, a, target_f, lse, rstd, weight = ctx.saved_tensors
    needs = [*ctx.needs_input_grad[:2], *ctx.needs_input_grad[3:5]]   # x, w, bias, norm_weight
    grads = torch.ops.coda.linear_cross_entropy_backward(grad, x, w, bias, norm_weight, a, target_f,
                                                         lse, rstd, weight, *ctx.options, needs)
    dx, dw, db, dg = _wanted(grads, needs)
    return dx, dw, None, db, dg, None, None, None, None, None, None, None


_linear_cross_entropy.register_autograd(_first_order(_linear_cross_entropy_grad),
                                        setup_context=_linear_cross_entropy_setup)


@_custom_op("coda::linear_cross_entropy_backward")
def _linear_cross_entropy_backward(grad: Tensor, x: Tensor, w: Tensor, bias: Tensor | None,
                                   norm_weight: Tensor | None, a: Tensor, target_f: Tensor,
                                   lse: Tensor, rstd: Tensor, weight: Tensor, label_smoothing: float,
                                   softcap: float | None, chunk_size: int | None, low_memory: bool,
                                   needs: list[bool]
                                   ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(dx, dw, dbias, dnorm_weight): LinearCrossEntropyFunction.backward; empty where `needs`
    (x, w, bias, norm_weight) is False."""
    h, lead = as_rows(x)
    norm = norm_weight is not None
    ctx = _Ctx((h, a if norm else h, w, bias, norm_weight, target_f, lse, rstd if norm else None,
                weight), (needs[0], needs[1], False, needs[2], needs[3]),
               options=(label_smoothing, softcap, chunk_size, low_memory, lead),
               grads_in_forward=False,
               dtypes=[None if t is None else t.dtype for t in (w, bias, norm_weight)])
    dx, dw, _, db, dg = LinearCrossEntropyFunction.backward(ctx, grad)[:5]
    return _gradients((dx, dw, db, dg), x)


@_register_fake(_linear_cross_entropy_backward)
def _linear_cross_entropy_backward_fake(grad, x, w, bias, norm_weight, a, target_f, lse, rstd,
                                        weight, label_smoothing, softcap, chunk_size, low_memory,
                                        needs):
    need_x, need_w, need_b, need_g = needs
    return (x.new_empty(x.shape) if need_x else x.new_empty(0),
            w.new_empty(w.shape) if need_w else x.new_empty(0),
            bias.new_empty(bias.shape) if need_b else x.new_empty(0),
            norm_weight.new_empty(norm_weight.shape) if need_g else x.new_empty(0))


@_custom_op("coda::linear_cross_entropy_with_grads")
def _linear_cross_entropy_with_grads(x: Tensor, w: Tensor, target: Tensor, bias: Tensor | None,
                                     norm_weight: Tensor | None, ignore_index: int, reduction: str,
                                     label_smoothing: float, softcap: float | None,
                                     chunk_size: int | None, norm_eps: float, needs: list[bool],
                                     skip_ignored: bool, exponential: bool
                                     ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """(loss, dx, dw, dbias, dnorm_weight) of a scalar loss, the gradients for an upstream
    gradient of 1 formed in the forward (LinearCrossEntropyFunction with grads_in_forward); dw,
    dbias and dnorm_weight in float32 (float64 for float64 x); empty where `needs` (x, w, bias,
    norm_weight) is False."""
    ctx = _Ctx(needs=(needs[0], needs[1], False, needs[2], needs[3]))
    loss = LinearCrossEntropyFunction.forward(ctx, x, w, target, bias, norm_weight, ignore_index,
                                              reduction, label_smoothing, softcap, chunk_size,
                                              False, norm_eps, True, skip_ignored, exponential)
    dx, dw, db, dg = ctx.saved_tensors
    dx = None if dx is None else dx.reshape(x.shape)
    return loss, *_gradients((dx, dw, db, dg), x)


@_register_fake(_linear_cross_entropy_with_grads)
def _linear_cross_entropy_with_grads_fake(x, w, target, bias, norm_weight, ignore_index, reduction,
                                          label_smoothing, softcap, chunk_size, norm_eps, needs,
                                          skip_ignored, exponential):
    stat = _stat_dtype(x)
    shapes = (x.shape, w.shape, w.shape[:1], x.shape[-1:])
    dtypes = (x.dtype, stat, stat, stat)
    # a gradient not asked for: x's empty placeholder, as the real kernel's (`_gradients`)
    return (x.new_empty((), dtype=stat), *(x.new_empty(shape, dtype=dtype) if need else x.new_empty(0)
                                           for shape, dtype, need in zip(shapes, dtypes, needs, strict=True)))


def _linear_cross_entropy_with_grads_setup(ctx, inputs, output):
    x, w, _, bias, norm_weight = inputs[:5]
    ctx.mark_non_differentiable(*output[1:])
    ctx.set_materialize_grads(False)
    ctx.save_for_backward(*output[1:])
    ctx.dtypes = [None if t is None else t.dtype for t in (x, w, bias, norm_weight)]


def _linear_cross_entropy_with_grads_grad(ctx, grad, *_):
    """The saved gradients times the upstream one, rounded once to each input's dtype (plain
    torch: the compiler fuses each into one kernel)."""
    grads = [None if dtype is None else (g * grad).to(dtype)
             for g, dtype in zip(ctx.saved_tensors, ctx.dtypes, strict=True)]
    needs = [*ctx.needs_input_grad[:2], *ctx.needs_input_grad[3:5]]
    dx, dw, db, dg = _wanted(grads, needs)
    return dx, dw, None, db, dg, None, None, None, None, None, None, None, None, None


_linear_cross_entropy_with_grads.register_autograd(_first_order(_linear_cross_entropy_with_grads_grad),
                                                   setup_context=_linear_cross_entropy_with_grads_setup)


def linear_cross_entropy_op(x: Tensor, w: Tensor, target: Tensor, bias: Tensor | None,
                            norm_weight: Tensor | None, ignore_index: int, reduction: str,
                            label_smoothing: float, softcap: float | None, chunk_size: int | None,
                            low_memory: bool, norm_eps: float, grads_in_forward: bool,
                            skip_ignored: bool, exponential: bool) -> Tensor:
    """linear_cross_entropy's launch (checked arguments) through coda::linear_cross_entropy, or
    coda::linear_cross_entropy_with_grads when the forward forms the gradients."""
    if grads_in_forward:
        needs = [t is not None and t.requires_grad for t in (x, w, bias, norm_weight)]
        return torch.ops.coda.linear_cross_entropy_with_grads(
            x, w, target, bias, norm_weight, ignore_index, reduction, label_smoothing, softcap,
            chunk_size, norm_eps, needs, skip_ignored, exponential)[0]
    return torch.ops.coda.linear_cross_entropy(x, w, target, bias, norm_weight, ignore_index,
                                               reduction, label_smoothing, softcap, chunk_size,
                                               low_memory, norm_eps)[0]


# rms_norm_linear ---------------------------------------------------------------------------------
@_custom_op("coda::rms_norm_linear")
def _rms_norm_linear(x: Tensor, g: Tensor, w: Tensor, bias: Tensor | None, sumsq: Tensor | None,
                     eps: float) -> tuple[Tensor, Tensor]:
    """(y, ss): RMSNormLinearFunction.forward; ss, the row sums of squares it computed, is empty
    when `sumsq` is given (the backward then reads sumsq itself)."""
    ctx = _Ctx()
    y = RMSNormLinearFunction.forward(ctx, x, g, w, bias, sumsq, eps)
    return y, ctx.saved_tensors[3] if sumsq is None else x.new_empty(0)


@_register_fake(_rms_norm_linear)
def _rms_norm_linear_fake(x, g, w, bias, sumsq, eps):
    ss = x.new_empty(_rows(x), dtype=_stat_dtype(x)) if sumsq is None else x.new_empty(0)
    return x.new_empty(*x.shape[:-1], w.shape[0]), ss


def _rms_norm_linear_setup(ctx, inputs, output):
    x, g, w, bias, sumsq, eps = inputs
    ctx.mark_non_differentiable(output[1])
    ctx.set_materialize_grads(False)
    ctx.save_for_backward(x, g, w, output[1] if sumsq is None else sumsq)
    ctx.eps, ctx.bias_dtype = eps, None if bias is None else bias.dtype


def _rms_norm_linear_grad(ctx, dy, _ss):
    x, g, w, ss = ctx.saved_tensors
    needs = ctx.needs_input_grad[:4]   # x, g, w, bias (sumsq is not differentiated)
    grads = torch.ops.coda.rms_norm_linear_backward(dy, x, g, w, ss, ctx.eps, needs, ctx.bias_dtype)
    return *_wanted(grads, needs), None, None


_rms_norm_linear.register_autograd(_first_order(_rms_norm_linear_grad), setup_context=_rms_norm_linear_setup)


@_custom_op("coda::rms_norm_linear_backward")
def _rms_norm_linear_backward(dy: Tensor, x: Tensor, g: Tensor, w: Tensor, ss: Tensor, eps: float,
                              needs: list[bool], bias_dtype: torch.dtype | None
                              ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(dx, dg, dw, dbias): RMSNormLinearFunction.backward; empty where `needs` is False."""
    ctx = _Ctx((x, g, w, ss.reshape(-1)), needs, eps=eps, bias_dtype=bias_dtype)
    return _gradients(RMSNormLinearFunction.backward(ctx, dy)[:4], x)


@_register_fake(_rms_norm_linear_backward)
def _rms_norm_linear_backward_fake(dy, x, g, w, ss, eps, needs, bias_dtype):
    shapes = (x.shape, g.shape, w.shape, w.shape[:1])
    dtypes = (x.dtype, g.dtype, w.dtype, bias_dtype)
    return tuple(x.new_empty(shape, dtype=dtype) if need else x.new_empty(0)
                 for shape, dtype, need in zip(shapes, dtypes, needs, strict=True))


def rms_norm_linear_op(x: Tensor, g: Tensor, w: Tensor, bias: Tensor | None, sumsq: Tensor | None,
                       eps: float) -> Tensor:
    """rms_norm_linear's launch (checked arguments) through coda::rms_norm_linear."""
    return torch.ops.coda.rms_norm_linear(x, g, w, bias, sumsq, eps)[0]


# layer_norm_linear -------------------------------------------------------------------------------
@_custom_op("coda::layer_norm_linear")
def _layer_norm_linear(x: Tensor, g: Tensor, beta: Tensor, w: Tensor, bias: Tensor | None,
                       eps: float, rowsum: Tensor | None, sumsq: Tensor | None
                       ) -> tuple[Tensor, Tensor, Tensor]:
    """(y, s, ss): LayerNormLinearFunction.forward; s and ss, the (shifted) row sums it computed,
    are empty when `rowsum` and `sumsq` are given."""
    ctx = _Ctx()
    y = LayerNormLinearFunction.forward(ctx, x, g, beta, w, bias, eps, rowsum, sumsq)
    if rowsum is not None:
        return y, x.new_empty(0), x.new_empty(0)
    return y, *ctx.saved_tensors[4:6]


@_register_fake(_layer_norm_linear)
def _layer_norm_linear_fake(x, g, beta, w, bias, eps, rowsum, sumsq):
    sums = (x.new_empty(0) if rowsum is not None else x.new_empty(_rows(x), dtype=_stat_dtype(x))
            for _ in range(2))
    return x.new_empty(*x.shape[:-1], w.shape[0]), *sums


def _layer_norm_linear_setup(ctx, inputs, output):
    x, g, beta, w, bias, eps, rowsum, sumsq = inputs
    ctx.mark_non_differentiable(*output[1:])
    ctx.set_materialize_grads(False)
    shifted = rowsum is None
    ctx.save_for_backward(x, g, beta, w, *(output[1:] if shifted else (rowsum, sumsq)))
    ctx.eps, ctx.shifted = eps, shifted
    ctx.bias_dtype = None if bias is None else bias.dtype


def _layer_norm_linear_grad(ctx, dy, _s, _ss):
    x, g, beta, w, s, ss = ctx.saved_tensors
    needs = ctx.needs_input_grad[:5]   # x, g, beta, w, bias (the given sums are not differentiated)
    grads = torch.ops.coda.layer_norm_linear_backward(dy, x, g, beta, w, s, ss, ctx.eps, ctx.shifted,
                                                      needs, ctx.bias_dtype)
    return *_wanted(grads, needs), None, None, None


_layer_norm_linear.register_autograd(_first_order(_layer_norm_linear_grad),
                                     setup_context=_layer_norm_linear_setup)


@_custom_op("coda::layer_norm_linear_backward")
def _layer_norm_linear_backward(dy: Tensor, x: Tensor, g: Tensor, beta: Tensor, w: Tensor, s: Tensor,
                                ss: Tensor, eps: float, shifted: bool, needs: list[bool],
                                bias_dtype: torch.dtype | None
                                ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """(dx, dg, dbeta, dw, dbias): LayerNormLinearFunction.backward; empty where `needs` is
    False. `shifted`: s and ss are the op's own sums about each row's first value (not given)."""
    ctx = _Ctx((x, g, beta, w, s.reshape(-1), ss.reshape(-1)), needs, eps=eps, shifted=shifted, split=None,
               bias_dtype=bias_dtype)
    return _gradients(LayerNormLinearFunction.backward(ctx, dy)[:5], x)


@_register_fake(_layer_norm_linear_backward)
def _layer_norm_linear_backward_fake(dy, x, g, beta, w, s, ss, eps, shifted, needs, bias_dtype):
    shapes = (x.shape, g.shape, beta.shape, w.shape, w.shape[:1])
    dtypes = (x.dtype, g.dtype, beta.dtype, w.dtype, bias_dtype)
    return tuple(x.new_empty(shape, dtype=dtype) if need else x.new_empty(0)
                 for shape, dtype, need in zip(shapes, dtypes, needs, strict=True))


def layer_norm_linear_op(x: Tensor, g: Tensor, beta: Tensor, w: Tensor, bias: Tensor | None,
                         eps: float, rowsum: Tensor | None, sumsq: Tensor | None) -> Tensor:
    """layer_norm_linear's launch (checked arguments) through coda::layer_norm_linear."""
    return torch.ops.coda.layer_norm_linear(x, g, beta, w, bias, eps, rowsum, sumsq)[0]


# out_proj_residual -------------------------------------------------------------------------------
@_custom_op("coda::out_proj_residual")
def _out_proj_residual(x: Tensor, w: Tensor, residual: Tensor, bias: Tensor | None, p: float,
                       seed: Tensor | None, stats: str | None) -> tuple[Tensor, Tensor, Tensor]:
    """(y, ss, s): OutProjResidualFunction.forward; ss is empty for stats=None, s unless "layer"."""
    return _with_sums(OutProjResidualFunction.forward(_Ctx(), x, w, residual, bias, p, _int(seed), stats), x)


@_register_fake(_out_proj_residual)
def _out_proj_residual_fake(x, w, residual, bias, p, seed, stats):
    return x.new_empty(*x.shape[:-1], w.shape[0]), *_sums_fake(x, stats)


def _out_proj_residual_setup(ctx, inputs, output):
    x, w, residual, bias, p, seed, _ = inputs
    ctx.mark_non_differentiable(*output[1:])
    ctx.set_materialize_grads(False)
    ctx.save_for_backward(x, w, seed)
    ctx.p, ctx.dtypes = p, (residual.dtype, None if bias is None else bias.dtype)


def _out_proj_residual_grad(ctx, dy, _ss, _s):
    x, w, seed = ctx.saved_tensors
    need_x, need_w, need_r, need_b = ctx.needs_input_grad[:4]
    residual_dtype, bias_dtype = ctx.dtypes
    needs = [need_x, need_w, need_b]
    dx = dw = db = None
    if any(needs):
        grads = torch.ops.coda.out_proj_residual_backward(dy, x, w, ctx.p, seed, needs, bias_dtype)
        dx, dw, db = _wanted(grads, needs)
    dresidual = dy.to(residual_dtype) if need_r else None   # outside the op: it is dy itself
    return dx, dw, dresidual, db, None, None, None


_out_proj_residual.register_autograd(_first_order(_out_proj_residual_grad),
                                     setup_context=_out_proj_residual_setup)


@_custom_op("coda::out_proj_residual_backward")
def _out_proj_residual_backward(dy: Tensor, x: Tensor, w: Tensor, p: float, seed: Tensor | None,
                                needs: list[bool], bias_dtype: torch.dtype | None
                                ) -> tuple[Tensor, Tensor, Tensor]:
    """(dx, dw, dbias): OutProjResidualFunction.backward; empty where `needs` (x, w, bias) is
    False. The residual's gradient, dy itself, is formed outside the op."""
    need_x, need_w, need_b = needs
    ctx = _Ctx((x, w), (need_x, need_w, False, need_b), p=p, seed=_int(seed),
               dtypes=(x.dtype, bias_dtype))
    dx, dw, _, db = OutProjResidualFunction.backward(ctx, dy)[:4]
    return _gradients((dx, dw, db), x)


@_register_fake(_out_proj_residual_backward)
def _out_proj_residual_backward_fake(dy, x, w, p, seed, needs, bias_dtype):
    need_x, need_w, need_b = needs
    return (x.new_empty(x.shape) if need_x else x.new_empty(0),
            w.new_empty(w.shape) if need_w else x.new_empty(0),
            x.new_empty(w.shape[0], dtype=bias_dtype) if need_b else x.new_empty(0))


def out_proj_residual_op(x: Tensor, w: Tensor, residual: Tensor, bias: Tensor | None, p: float,
                         seed: int | None, stats: str | None) -> Tensor | tuple[Tensor, ...]:
    """out_proj_residual's launch (checked arguments, the caller's seed) through
    coda::out_proj_residual: y, (y, ss) or (y, ss, s) as the op returns them."""
    y, ss, s = torch.ops.coda.out_proj_residual(x, w, residual, bias, p, _seed(p, seed), stats)
    return _as_returned(stats, y, ss, s)


# interleave with a gain ----------------------------------------------------------------------------
@_custom_op("coda::interleave_gain")
def _interleave_gain(w_gate: Tensor, w_up: Tensor, gain: Tensor) -> Tensor:
    """InterleaveGain.forward: interleave(w_gate, w_up) * gain, [2F, H]."""
    return InterleaveGain.forward(_Ctx(), w_gate, w_up, gain)


@_register_fake(_interleave_gain)
def _interleave_gain_fake(w_gate, w_up, gain):
    return w_gate.new_empty(2 * w_gate.shape[0], w_gate.shape[1])


def _interleave_gain_setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _interleave_gain_grad(ctx, d):
    return torch.ops.coda.interleave_gain_backward(d, *ctx.saved_tensors)


_interleave_gain.register_autograd(_first_order(_interleave_gain_grad), setup_context=_interleave_gain_setup)


@_custom_op("coda::interleave_gain_backward")
def _interleave_gain_backward(d: Tensor, w_gate: Tensor, w_up: Tensor, gain: Tensor
                              ) -> tuple[Tensor, Tensor, Tensor]:
    """(d w_gate, d w_up, d gain): InterleaveGain.backward."""
    return InterleaveGain.backward(_Ctx((w_gate, w_up, gain)), d)


@_register_fake(_interleave_gain_backward)
def _interleave_gain_backward_fake(d, w_gate, w_up, gain):
    return w_gate.new_empty(w_gate.shape), w_up.new_empty(w_up.shape), gain.new_empty(gain.shape)


def interleave_gain_op(w_gate: Tensor, w_up: Tensor, gain: Tensor) -> Tensor:
    """interleave(w_gate, w_up, gain)'s launch (checked arguments) through coda::interleave_gain."""
    return torch.ops.coda.interleave_gain(w_gate, w_up, gain)


# rms_rstd ----------------------------------------------------------------------------------------
@_custom_op("coda::rms_rstd")
def _rms_rstd(h: Tensor, ss: Tensor, eps: float) -> Tensor:
    """RmsRstd.forward: rstd in h's dtype."""
    return RmsRstd.forward(_Ctx(), h, ss, eps)


@_register_fake(_rms_rstd)
def _rms_rstd_fake(h, ss, eps):
    return ss.new_empty(ss.shape, dtype=h.dtype)


def _rms_rstd_setup(ctx, inputs, output):
    h, ss, eps = inputs
    ctx.save_for_backward(h, ss)
    ctx.eps = eps


def _rms_rstd_grad(ctx, drstd):
    h, ss = ctx.saved_tensors
    dh = torch.ops.coda.rms_rstd_backward(drstd, h, ss, ctx.eps) if ctx.needs_input_grad[0] else None
    return dh, None, None


_rms_rstd.register_autograd(_first_order(_rms_rstd_grad), setup_context=_rms_rstd_setup)


@_custom_op("coda::rms_rstd_backward")
def _rms_rstd_backward(drstd: Tensor, h: Tensor, ss: Tensor, eps: float) -> Tensor:
    """dh: RmsRstd.backward, its saved float rstd recomputed by RmsRstd.forward from ss (a few
    flops per row, instead of a second output that may alias the first)."""
    ctx = _Ctx()
    RmsRstd.forward(ctx, h, ss, eps)
    return RmsRstd.backward(ctx, drstd)[0]


@_register_fake(_rms_rstd_backward)
def _rms_rstd_backward_fake(drstd, h, ss, eps):
    return h.new_empty(h.shape)


def rms_rstd_op(h: Tensor, ss: Tensor, eps: float) -> Tensor:
    """rms_rstd through coda::rms_rstd."""
    return torch.ops.coda.rms_rstd(h, ss, eps)


# coda.nn.layer_norm and rms_norm ---------------------------------------------------------------
@_custom_op("coda::layer_norm")
def _layer_norm(x: Tensor, g: Tensor, beta: Tensor, eps: float, rowsum: Tensor | None,
                sumsq: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
    """(y, s, ss): coda.nn.layer_norm's NormFunction.forward; s and ss, the shifted row sums it
    computed, are empty when `rowsum` and `sumsq` are given."""
    ctx = _Ctx()
    y = NormFunction.forward(ctx, x, g, beta, eps, rowsum, sumsq)
    if rowsum is not None:
        return y, x.new_empty(0), x.new_empty(0)
    _, _, ss, s = ctx.saved_tensors
    return y, s, ss


@_register_fake(_layer_norm)
def _layer_norm_fake(x, g, beta, eps, rowsum, sumsq):
    sums = (x.new_empty(0) if rowsum is not None else x.new_empty(_rows(x), dtype=_stat_dtype(x))
            for _ in range(2))
    return x.new_empty(x.shape), *sums


def _layer_norm_setup(ctx, inputs, output):
    x, g, beta, eps, rowsum, sumsq = inputs
    ctx.mark_non_differentiable(*output[1:])
    ctx.set_materialize_grads(False)
    shifted = rowsum is None
    ctx.save_for_backward(x, g, *(output[1:] if shifted else (rowsum, sumsq)))
    ctx.eps, ctx.shifted, ctx.beta_dtype = eps, shifted, beta.dtype


def _layer_norm_grad(ctx, dy, _s, _ss):
    x, g, s, ss = ctx.saved_tensors
    needs = ctx.needs_input_grad[:3]   # x, g, beta (the given sums are not differentiated)
    grads = torch.ops.coda.layer_norm_backward(dy, x, g, s, ss, ctx.eps, ctx.shifted, needs,
                                               ctx.beta_dtype)
    return *_wanted(grads, needs), None, None, None


_layer_norm.register_autograd(_first_order(_layer_norm_grad), setup_context=_layer_norm_setup)


@_custom_op("coda::layer_norm_backward")
def _layer_norm_backward(dy: Tensor, x: Tensor, g: Tensor, s: Tensor, ss: Tensor, eps: float,
                         shifted: bool, needs: list[bool], beta_dtype: torch.dtype
                         ) -> tuple[Tensor, Tensor, Tensor]:
    """(dx, dg, dbeta): NormFunction.backward; empty where `needs` is False. `shifted`: s and ss
    are the op's own sums about each row's first value (not given)."""
    ctx = _Ctx((x, g, ss.reshape(-1), s.reshape(-1)), needs, eps=eps, shifted=shifted, beta_dtype=beta_dtype)
    return _gradients(NormFunction.backward(ctx, dy)[:3], x)


@_register_fake(_layer_norm_backward)
def _layer_norm_backward_fake(dy, x, g, s, ss, eps, shifted, needs, beta_dtype):
    shapes, dtypes = (x.shape, g.shape, g.shape), (x.dtype, g.dtype, beta_dtype)
    return tuple(x.new_empty(shape, dtype=dtype) if need else x.new_empty(0)
                 for shape, dtype, need in zip(shapes, dtypes, needs, strict=True))


def layer_norm_op(x: Tensor, g: Tensor, beta: Tensor, eps: float, rowsum: Tensor | None,
                  sumsq: Tensor | None) -> Tensor:
    """coda.nn.layer_norm's launch (checked arguments) through coda::layer_norm."""
    return torch.ops.coda.layer_norm(x, g, beta, eps, rowsum, sumsq)[0]


@_custom_op("coda::rms_norm")
def _rms_norm(x: Tensor, g: Tensor, eps: float, sumsq: Tensor | None) -> tuple[Tensor, Tensor]:
    """(y, ss): coda.nn.rms_norm's NormFunction.forward; ss, the row sums of squares it
    computed, is empty when `sumsq` is given."""
    ctx = _Ctx()
    y = NormFunction.forward(ctx, x, g, None, eps, None, sumsq)
    return y, x.new_empty(0) if sumsq is not None else ctx.saved_tensors[2]


@_register_fake(_rms_norm)
def _rms_norm_fake(x, g, eps, sumsq):
    return x.new_empty(x.shape), (x.new_empty(0) if sumsq is not None
                                  else x.new_empty(_rows(x), dtype=_stat_dtype(x)))


def _rms_norm_setup(ctx, inputs, output):
    x, g, eps, sumsq = inputs
    ctx.mark_non_differentiable(output[1])
    ctx.set_materialize_grads(False)
    ctx.save_for_backward(x, g, output[1] if sumsq is None else sumsq)
    ctx.eps = eps


def _rms_norm_grad(ctx, dy, _ss):
    x, g, ss = ctx.saved_tensors
    needs = ctx.needs_input_grad[:2]   # x, g (the given sums are not differentiated)
    grads = torch.ops.coda.rms_norm_backward(dy, x, g, ss, ctx.eps, needs)
    return *_wanted(grads, needs), None, None


_rms_norm.register_autograd(_first_order(_rms_norm_grad), setup_context=_rms_norm_setup)


@_custom_op("coda::rms_norm_backward")
def _rms_norm_backward(dy: Tensor, x: Tensor, g: Tensor, ss: Tensor, eps: float, needs: list[bool]
                       ) -> tuple[Tensor, Tensor]:
    """(dx, dg): NormFunction.backward of RMSNorm; empty where `needs` is False."""
    ctx = _Ctx((x, g, ss.reshape(-1)), needs, eps=eps, shifted=False, beta_dtype=None)
    return _gradients(NormFunction.backward(ctx, dy)[:2], x)


@_register_fake(_rms_norm_backward)
def _rms_norm_backward_fake(dy, x, g, ss, eps, needs):
    return tuple(x.new_empty(shape, dtype=dtype) if need else x.new_empty(0)
                 for shape, dtype, need in zip((x.shape, g.shape), (x.dtype, g.dtype), needs, strict=True))


def rms_norm_op(x: Tensor, g: Tensor, eps: float, sumsq: Tensor | None) -> Tensor:
    """coda.nn.rms_norm's launch (checked arguments) through coda::rms_norm."""
    return torch.ops.coda.rms_norm(x, g, eps, sumsq)[0]


# the coda.ops functions, through the custom ops in eager mode too --------------------------------
def _through_custom_ops(fn: Callable, where: str = "coda.ops") -> Callable:
    """`fn` (a coda.ops function) with its launches routed through the custom ops."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if torch.compiler.is_compiling():   # routed already (and no context manager to trace)
            return fn(*args, **kwargs)
        with custom_ops():
            return fn(*args, **kwargs)

    wrapper.__doc__ = f"`{where}.{fn.__name__}` through the custom ops, in eager mode too.\n\n{fn.__doc__}"
    return wrapper


linear = _through_custom_ops(ops.linear)
mlp = _through_custom_ops(ops.mlp)
dropout = _through_custom_ops(ops.dropout)
swiglu_mlp = _through_custom_ops(ops.swiglu_mlp)
geglu_mlp = _through_custom_ops(ops.geglu_mlp)
qkv_rope = _through_custom_ops(ops.qkv_rope)
linear_cross_entropy = _through_custom_ops(ops.linear_cross_entropy)
rms_norm_linear = _through_custom_ops(ops.rms_norm_linear)
layer_norm_linear = _through_custom_ops(ops.layer_norm_linear)
out_proj_residual = _through_custom_ops(ops.out_proj_residual)
rms_rstd = _through_custom_ops(ops.rms_rstd)
layer_norm = _through_custom_ops(_nn_layer_norm, "coda.nn")
rms_norm = _through_custom_ops(_nn_rms_norm, "coda.nn")

__all__ = ["custom_ops", "dropout", "geglu_mlp", "layer_norm", "layer_norm_linear", "linear",
           "linear_cross_entropy", "mlp", "out_proj_residual", "qkv_rope", "rms_norm",
           "rms_norm_linear", "rms_rstd", "routed", "swiglu_mlp"]
