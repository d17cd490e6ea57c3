"""Drop-in `nn.Module`s whose forward is one `coda.ops` op.

Each module has the parameter names and shapes of its PyTorch counterpart, so a state dict of
the standard module loads as it is (`load_state_dict`), and `from_torch(module)` builds one from
an existing module (parameters copied, same device and dtype):

- `Linear(in, out, bias, activation, dropout)`: `weight`, `bias` (an `nn.Linear` subclass) -> `linear`
- `FusedMLP(dim, hidden, activation, bias, dropout)`: `fc1.*`, `fc2.*` (two `nn.Linear`) -> `mlp`
- `SwiGLUMLP(dim, hidden)`: `gate_proj.weight`, `up_proj.weight`, `down_proj.weight` (LLaMA's MLP)
  -> `swiglu_mlp`
- `RMSNormLinear(dim, out, eps, bias=False)`: `norm.weight`, `linear.weight` (`linear.bias`)
  -> `rms_norm_linear`
- `LayerNormLinear(dim, out, eps, bias=True)`: `norm.weight`, `norm.bias`, `linear.weight`,
  `linear.bias` -> `layer_norm_linear`

Activations use the ops' names: "gelu" is the tanh approximation (`nn.GELU(approximate="tanh")`),
"gelu_erf" the exact one (`nn.GELU()`). Dropout runs only in training mode, with CODA's
counter-based masks (same p as torch, not torch's RNG stream).
"""

from __future__ import annotations

import copy
import itertools

import torch
import torch.nn.functional as F
from torch import nn

from .. import ops
from ..errors import CodaError, LaunchError
from ..ops import checks
from ..ops.dropout import check_probability
from ..ops.linear import activation_reference, check_activation


def head_dim(dim: int, n_heads: int, n_kv_heads: int | None = None) -> int:
    """dim // n_heads, once the heads split dim evenly and (grouped-query attention) n_heads is a
    multiple of n_kv_heads: a block refuses at construction what its attention could not run."""
    if n_heads < 1 or dim % n_heads:
        raise CodaError(f"n_heads={n_heads} must divide the model width {dim}")
    if n_kv_heads is not None and (n_kv_heads < 1 or n_heads % n_kv_heads):
        raise CodaError(f"n_kv_heads={n_kv_heads} must divide n_heads={n_heads}")
    return dim // n_heads


def check_options(activation: object, dropout: object) -> None:
    """A LaunchError naming the argument unless `activation` is one of the ops' and `dropout` a
    probability: when the module is built, as nn.Dropout does, not at the first forward in
    training mode (an evaluation-mode forward never reads the probability)."""
    check_activation(activation)
    check_probability(dropout, "dropout")


def check_sequence(block: str, x: object, dim: int) -> None:
    """A LaunchError unless x is a floating-point tensor [B, T, dim]. A block's attention splits
    heads from that layout: a [T, dim] input would fail inside an op with a message about
    another argument (a rope table, a weight), or, in an eager twin, attend across heads."""
    if (not isinstance(x, torch.Tensor) or x.dim() != 3 or x.shape[-1] != dim
            or not x.is_floating_point()):
        raise LaunchError(f"{block}: x must be a floating-point tensor [B, T, {dim}], got "
                          f"{checks.describe(x)}")


class Linear(nn.Linear):
    """`dropout(f(x @ weight.T + bias))` as one `coda.ops.linear`; an `nn.Linear` with the
    activation and dropout in the GEMM's epilogue."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, activation: str | None = None,
                 dropout: float = 0.0, device: torch.device | None = None, dtype: torch.dtype | None = None):
        check_options(activation, dropout)
        super().__init__(in_features, out_features, bias, device=device, dtype=dtype)
        self.activation, self.dropout = activation, dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ops.linear(x, self.weight, self.bias, self.activation, self.dropout if self.training else 0.0)

    @classmethod
    def from_torch(cls, linear: nn.Linear, activation: str | None = None, dropout: float = 0.0) -> Linear:
        _plain(linear, nn.Linear, "Linear.from_torch")
        new = cls(linear.in_features, linear.out_features, linear.bias is not None, activation, dropout,
                  device=linear.weight.device, dtype=linear.weight.dtype)
        new.load_state_dict(linear.state_dict())
        return new

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, activation={self.activation}, dropout={self.dropout}"


class FusedMLP(nn.Module):
    """`dropout(f(x @ fc1.weight.T + fc1.bias) @ fc2.weight.T + fc2.bias) + residual` as one
    `coda.ops.mlp` (two GEMMs; activation, dropout and the optional residual in their epilogues)."""

    def __init__(self, dim: int, hidden: int, activation: str | None = "gelu", bias: bool = True,
                 dropout: float = 0.0, device: torch.device | None = None, dtype: torch.dtype | None = None):
        check_options(activation, dropout)
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden, bias, device=device, dtype=dtype)
        self.fc2 = nn.Linear(hidden, dim, bias, device=device, dtype=dtype)
        self.activation, self.dropout = activation, dropout

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        return ops.mlp(x, self.fc1.weight, self.fc1.bias, self.fc2.weight, self.fc2.bias, self.activation,
                       self.dropout if self.training else 0.0, residual=residual)

    @classmethod
    def from_torch(cls, module: nn.Module, activation: str | None = "gelu", dropout: float = 0.0) -> FusedMLP:
        """From any module with `fc1` and `fc2` nn.Linear children (e.g. timm's / ViT's `Mlp`, HF's
        CLIPMLP), both biased or neither (FusedMLP has one `bias` flag for the two), fc2 mapping
        fc1's width back. `activation` must be what the module applies between them: its other
        children are checked (the activation module, run on a probe; timm's `norm` and dropouts
        must be no-ops), and then the whole module on a probe against fc2(activation(fc1(x))) (an
        activation its forward() calls has no child to check), so that a module computing something
        else is a CodaError, not a silently different function."""
        check_options(activation, dropout)
        _with_values(module, "FusedMLP.from_torch")
        fc1, fc2 = _children(module, ("fc1", "fc2"), "FusedMLP.from_torch")
        kind = type(module).__name__
        if (fc1.bias is None) != (fc2.bias is None):
            raise CodaError(f"FusedMLP.from_torch: {kind} has a bias in only one of fc1 and "
                            f"fc2; FusedMLP has both or neither")
        if (fc2.in_features, fc2.out_features) != (fc1.out_features, fc1.in_features):
            raise CodaError(f"FusedMLP.from_torch: {kind}'s fc2 maps {fc2.in_features} features to "
                            f"{fc2.out_features}; FusedMLP's maps fc1's {fc1.out_features} back to "
                            f"{fc1.in_features}")
        for child_name, child in module.named_children():
            if child_name in ("fc1", "fc2") or isinstance(child, nn.Identity):
                continue
            if isinstance(child, nn.Dropout):
                if child.p:
                    raise CodaError(f"FusedMLP.from_torch: {kind}.{child_name} is {child!r}; FusedMLP's one "
                                    f"dropout follows fc2 (dropout=) and where this one runs cannot be "
                                    f"told: set its p to 0 first")
                continue
            if not _computes(child, lambda x: activation_reference(activation, x), fc1.out_features):
                raise CodaError(f"FusedMLP.from_torch: {kind}.{child_name} ({child!r}) does not compute "
                                f"activation={activation!r}, and FusedMLP is fc2(activation(fc1(x))): "
                                f"no other layer between them (a norm there cannot be folded). If it "
                                f"is the activation, pass the one it computes ('gelu' is the tanh form, "
                                f"nn.GELU(approximate='tanh'); 'gelu_erf' is nn.GELU())")
        up, down = _as_float64(fc1, fc2)
        if not _computes(module, lambda x: down(activation_reference(activation, up(x))), fc1.in_features):
            raise CodaError(f"FusedMLP.from_torch: {kind} does not compute fc2(activation(fc1(x))) with "
                            f"activation={activation!r} on a probe: its forward() does something its "
                            f"children do not show (an activation called there, a scale, a residual)")
        new = cls(fc1.in_features, fc1.out_features, activation, fc1.bias is not None, dropout,
                  device=fc1.weight.device, dtype=fc1.weight.dtype)
        new.load_state_dict({f"{name}.{key}": t for name, fc in (("fc1", fc1), ("fc2", fc2))
                             for key, t in fc.state_dict().items()})
        return new


class SwiGLUMLP(nn.Module):
    """LLaMA's MLP, `down_proj(silu(gate_proj(x)) * up_proj(x)) (+ residual)`, as one
    `coda.ops.swiglu_mlp`.

    The op reads one interleaved [2F, H] weight (`coda.ops.interleave(gate, up)`); the parameters
    stay LLaMA's two [F, H] matrices, so each forward builds the interleaved weight: a copy of
    2FH elements per call (autograd routes its gradient back to the two parameters). `rstd` folds
    an RMSNorm's row scale in (then the norm's gain must already be in the weight: see
    `coda.nn.llama`)."""

    def __init__(self, dim: int, hidden: int, device: torch.device | None = None,
                 dtype: torch.dtype | None = None):
        super().__init__()
        self.gate_proj = nn.Linear(dim, hidden, bias=False, device=device, dtype=dtype)
        self.up_proj = nn.Linear(dim, hidden, bias=False, device=device, dtype=dtype)
        self.down_proj = nn.Linear(hidden, dim, bias=False, device=device, dtype=dtype)

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        w_gate_up = ops.interleave(self.gate_proj.weight, self.up_proj.weight)
        return ops.swiglu_mlp(x, w_gate_up, self.down_proj.weight, residual=residual)

    @classmethod
    def from_torch(cls, module: nn.Module) -> SwiGLUMLP:
        """From any module with bias-free `gate_proj`, `up_proj`, `down_proj` (e.g. HF's LlamaMLP)
        and, if it has an `act_fn`, a SiLU one; the whole module is then run on a probe against
        down_proj(silu(gate_proj(x)) * up_proj(x)). Biases or another activation (HF's
        `mlp_bias=True`, a GeGLU's GELU) raise CodaError: this module has neither, and would drop
        them silently."""
        names = ("gate_proj", "up_proj", "down_proj")
        _with_values(module, "SwiGLUMLP.from_torch")
        projections = _children(module, names, "SwiGLUMLP.from_torch")
        biased = [name for name, fc in zip(names, projections, strict=True) if fc.bias is not None]
        if biased:
            raise CodaError(f"SwiGLUMLP.from_torch: {type(module).__name__}'s {', '.join(biased)} carry a "
                            f"bias; SwiGLUMLP (swiglu_mlp) has none")
        act = getattr(module, "act_fn", None)
        if act is not None and not _computes(act, F.silu, module.gate_proj.weight.shape[0]):
            raise CodaError(f"SwiGLUMLP.from_torch: {type(module).__name__}.act_fn is {act!r}, not SiLU; "
                            f"SwiGLUMLP computes silu(gate) * up")
        gate, up, down = _as_float64(*projections)
        if not _computes(module, lambda x: down(F.silu(gate(x)) * up(x)), gate.in_features):
            raise CodaError(f"SwiGLUMLP.from_torch: {type(module).__name__} does not compute "
                            f"down_proj(silu(gate_proj(x)) * up_proj(x)) on a probe: its forward() "
                            f"does something its children do not show (another activation called "
                            f"there, a GeGLU's GELU, a scale)")
        w = module.gate_proj.weight
        new = cls(w.shape[1], w.shape[0], device=w.device, dtype=w.dtype)
        new.load_state_dict({f"{name}.weight": getattr(module, name).weight for name in names})
        return new


class RMSNormLinear(nn.Module):
    """`linear(norm(x))` with `norm` an `nn.RMSNorm`, as one `coda.ops.rms_norm_linear` (the norm
    folded into the GEMM)."""

    def __init__(self, dim: int, out: int, eps: float | None = 1e-6, bias: bool = False,
                 device: torch.device | None = None, dtype: torch.dtype | None = None):
        """eps None: the epsilon of the dtype the norm computes in, as nn.RMSNorm's default (`rms_eps`)."""
        super().__init__()
        self.norm = nn.RMSNorm(dim, eps=eps, device=device, dtype=dtype)
        self.linear = nn.Linear(dim, out, bias, device=device, dtype=dtype)

    def forward(self, x: torch.Tensor, sumsq: torch.Tensor | None = None) -> torch.Tensor:
        """sumsq: Σ x² per row when x's producer summed it (`out_proj_residual(stats="rms")`)."""
        return ops.rms_norm_linear(x, self.norm.weight, self.linear.weight, rms_eps(self.norm, x),
                                   self.linear.bias, sumsq)

    @classmethod
    def from_torch(cls, norm: nn.Module, linear: nn.Linear) -> RMSNormLinear:
        """From an nn.RMSNorm, or HF's RMSNorm of LLaMA and its kin (`weight`, `variance_epsilon`),
        and the nn.Linear after it."""
        _plain(linear, nn.Linear, "RMSNormLinear.from_torch")
        w = linear.weight
        new = cls(linear.in_features, linear.out_features, _rms_norm_eps(norm), linear.bias is not None,
                  device=w.device, dtype=w.dtype)
        _copy_norm(norm, new.norm, linear.in_features)
        new.linear.load_state_dict(linear.state_dict())
        return new


class LayerNormLinear(nn.Module):
    """`linear(norm(x))` with `norm` an `nn.LayerNorm`, as one `coda.ops.layer_norm_linear` (the
    norm folded into the GEMM)."""

    def __init__(self, dim: int, out: int, eps: float = 1e-5, bias: bool = True,
                 device: torch.device | None = None, dtype: torch.dtype | None = None):
        super().__init__()
        self.norm = nn.LayerNorm(dim, eps=eps, device=device, dtype=dtype)
        self.linear = nn.Linear(dim, out, bias, device=device, dtype=dtype)

    def forward(self, x: torch.Tensor, rowsum: torch.Tensor | None = None,
                sumsq: torch.Tensor | None = None) -> torch.Tensor:
        """rowsum, sumsq: Σ x and Σ x² per row when x's producer summed them
        (`out_proj_residual(stats="layer")`)."""
        return ops.layer_norm_linear(x, self.norm.weight, self.norm.bias, self.linear.weight,
                                     self.linear.bias, self.norm.eps, rowsum, sumsq)

    @classmethod
    def from_torch(cls, norm: nn.LayerNorm, linear: nn.Linear) -> LayerNormLinear:
        """From an nn.LayerNorm and the nn.Linear after it (a norm of another formula would fold
        in as a LayerNorm: refused)."""
        if not isinstance(norm, nn.LayerNorm):
            raise CodaError(f"LayerNormLinear.from_torch: {type(norm).__name__} is not an nn.LayerNorm "
                            f"(an RMSNorm folds in with RMSNormLinear.from_torch)")
        _plain(norm, nn.LayerNorm, "LayerNormLinear.from_torch")
        _plain(linear, nn.Linear, "LayerNormLinear.from_torch")
        w = linear.weight
        new = cls(linear.in_features, linear.out_features, norm.eps, linear.bias is not None,
                  device=w.device, dtype=w.dtype)
        _copy_norm(norm, new.norm, linear.in_features)
        new.linear.load_state_dict(linear.state_dict())
        return new


def rms_eps(norm: nn.RMSNorm, x: torch.Tensor) -> float:
    """An nn.RMSNorm's eps for input x: its own, or (None) the epsilon of the dtype it computes
    in, as nn.RMSNorm's: float32's for float16 and bfloat16 x (PyTorch's rms_norm takes its
    compute type's epsilon, 2**-23, not bfloat16's 2**-7, which at activations of 0.05 made the
    fused block 35x less accurate than its eager twin), float64's for float64 x."""
    return torch.finfo(torch.promote_types(x.dtype, torch.float32)).eps if norm.eps is None else norm.eps


def _plain(module: nn.Module, base: type[nn.Module], what: str) -> None:
    """Refuse what is not a `base`, or a subclass with a forward of its own: from_torch copies a
    torch layer's parameters into a fused module that computes `base`'s formula, and what another
    forward adds (a scale, an activation: a coda.nn.Linear's) would be dropped silently."""
    if not isinstance(module, base):
        raise CodaError(f"{what} takes an nn.{base.__name__}, got {type(module).__name__}")
    if type(module).forward is not base.forward:
        name = f"{type(module).__module__}.{type(module).__qualname__}"
        raise CodaError(f"{what}: {name} has a forward of its own; only what an "
                        f"nn.{base.__name__} computes folds in (what its forward adds would be dropped)")


def _with_values(module: nn.Module, what: str) -> None:
    """Refuse a module on the meta device where from_torch must run it on a probe to check what it
    computes: a meta tensor has no values to run."""
    if any(t.is_meta for t in itertools.chain(module.parameters(), module.buffers())):
        raise CodaError(f"{what}: {type(module).__name__} is on the meta device, and from_torch runs it "
                        f"on a probe to check what it computes: convert it on a real device first, or "
                        f"build the CODA module directly")


def _children(module: nn.Module, names: tuple[str, ...], what: str) -> list[nn.Linear]:
    """The nn.Linear children `names` of `module`, or a CodaError naming what is missing."""
    found = [getattr(module, name, None) for name in names]
    if not all(isinstance(fc, nn.Linear) for fc in found):
        children = ", ".join(name for name, _ in module.named_children()) or "none"
        raise CodaError(f"{what}: {type(module).__name__} has no nn.Linear children named "
                        f"{', '.join(names)} (it has: {children})")
    return found


def _as_float64(*linears: nn.Linear) -> list[nn.Linear]:
    """Float64 CPU copies of `linears`: the formula a whole module is probed against."""
    return [copy.deepcopy(fc).to(device="cpu", dtype=torch.float64) for fc in linears]


def _computes(module: nn.Module, fn, width: int, rtol: float = 1e-5, atol: float = 1e-8) -> bool:
    """Whether `module` maps a probe [3, width] of values over [-4, 4] to fn(probe): run on a
    float64 copy on the CPU (the module itself untouched) and on a copy of the probe (an
    in-place module overwrites its input). A module that cannot run on it does not."""
    probe = torch.linspace(-4.0, 4.0, 3 * width, dtype=torch.float64).reshape(3, width)
    try:
        with torch.no_grad():
            got = copy.deepcopy(module).to(device="cpu", dtype=torch.float64)(probe.clone())
    except Exception:   # whatever it raises, it is not fn
        return False
    return (isinstance(got, torch.Tensor) and got.shape == probe.shape
            and torch.allclose(got, fn(probe), rtol=rtol, atol=atol))


def _rms_norm_eps(norm: nn.Module) -> float | None:
    """The eps of an nn.RMSNorm (None: its compute dtype's epsilon, as there), or of a
    module with a gain `weight` [n] and a float `variance_epsilon` (HF's LlamaRMSNorm and its
    kin), once a probe shows it computes weight * x * rsqrt(mean(x²) + eps): a norm of another
    formula under those names (a (1 + weight) gain, say) would fold in wrong, silently."""
    if isinstance(norm, nn.RMSNorm):
        _plain(norm, nn.RMSNorm, "RMSNormLinear.from_torch")
        return norm.eps
    _with_values(norm, "RMSNormLinear.from_torch")
    g, eps = getattr(norm, "weight", None), getattr(norm, "variance_epsilon", None)
    if not isinstance(g, torch.Tensor) or g.dim() != 1 or not isinstance(eps, float):
        raise CodaError(f"RMSNormLinear.from_torch: {type(norm).__name__} is neither an nn.RMSNorm nor an "
                        f"RMSNorm with a gain `weight` [n] and a float `variance_epsilon` (HF's LLaMA's)")
    gain = g.detach().cpu().double()

    def rms_norm(x: torch.Tensor) -> torch.Tensor:
        return gain * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    if not _computes(norm, rms_norm, g.shape[0], rtol=1e-4, atol=1e-6):
        raise CodaError(f"RMSNormLinear.from_torch: {type(norm).__name__} does not compute "
                        f"weight * x * rsqrt(mean(x²) + variance_epsilon); it cannot fold into the GEMM")
    return eps


def _copy_norm(norm: nn.Module, into: nn.Module, dim: int) -> None:
    """A torch norm's parameters into the fused module's norm. It must normalize x's last
    dimension, of the linear's in_features (an HF RMSNorm, without `normalized_shape`: its
    gain's length); a gain or bias it lacks (`elementwise_affine=False`, `bias=False`) becomes
    a constant, the constructor's one or zero, as a buffer outside the state dict: the fused
    module's state dict is the torch pair's, strictly, and nothing can train the constant."""
    shape = tuple(norm.normalized_shape if hasattr(norm, "normalized_shape") else norm.weight.shape)
    if shape != (dim,):
        raise CodaError(f"from_torch: the norm normalizes over {list(shape)}; only a "
                        f"norm over the last dimension, the linear's in_features = {dim}, folds into it")
    with torch.no_grad():
        for name in ("weight", "bias"):
            theirs, ours = getattr(norm, name, None), getattr(into, name, None)
            if ours is None:
                continue
            if theirs is None:
                delattr(into, name)
                into.register_buffer(name, ours.detach(), persistent=False)
            else:
                ours.copy_(theirs)
