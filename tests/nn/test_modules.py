"""coda.nn drop-in modules against their PyTorch counterparts with the same state dict.

Each module loads the float64 torch module's `state_dict()` (strict: same names and shapes), then
forward and every gradient (input, residual, each parameter by name) are compared with autograd of
the torch module:
- float64 through the reference backend, to 1e-10;
- float32 through the Triton interpreter (the real kernels), against the float64 torch module, to
  1e-4 of each tensor's largest magnitude: float32 rounding (u = 6e-8) over reductions of at most
  ~100 terms, several GEMMs deep, stays below 1e-5 relative; 1e-4 leaves a 10x margin.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import coda
import oracle
from coda.nn import FusedMLP, LayerNormLinear, Linear, RMSNormLinear, SwiGLUMLP

F64, F32 = torch.float64, torch.float32
TOL = {F64: 1e-10, F32: 1e-4}


class TorchMLP(nn.Module):
    def __init__(self, dim: int, hidden: int, act, bias: bool = True):
        super().__init__()
        self.fc1, self.fc2, self.act = nn.Linear(dim, hidden, bias), nn.Linear(hidden, dim, bias), act

    def forward(self, x, residual=None):
        y = self.fc2(self.act(self.fc1(x)))
        return y if residual is None else y + residual


class TorchSwiGLU(nn.Module):  # LLaMA's MLP
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.gate_proj = nn.Linear(dim, hidden, bias=False)
        self.up_proj = nn.Linear(dim, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, dim, bias=False)

    def forward(self, x, residual=None):
        y = self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
        return y if residual is None else y + residual


class TorchNormLinear(nn.Module):
    def __init__(self, norm: nn.Module, linear: nn.Linear):
        super().__init__()
        self.norm, self.linear = norm, linear

    def forward(self, x):
        return self.linear(self.norm(x))


def randomize(module: nn.Module, seed: int = 0) -> nn.Module:
    return oracle.randomize(module, scale=0.3, vector_offset=0.5, seed=seed)


def check(ours: nn.Module, ref: nn.Module, shapes: list[tuple[int, ...]], dtype: torch.dtype,
          ref_fn=None) -> None:
    """Forward and all gradients of `ours` (in dtype) against `ref` (float64), parameters by name."""
    ref_fn = ref_fn or ref
    ours = copy.deepcopy(ours).to(dtype)
    gen = torch.Generator().manual_seed(1)
    inputs64 = [torch.randn(s, generator=gen, dtype=F64).requires_grad_() for s in shapes]
    inputs = [t.detach().to(dtype).requires_grad_() for t in inputs64]
    y, y64 = ours(*inputs), ref_fn(*inputs64)
    dy = torch.randn(y64.shape, generator=gen, dtype=F64)
    names = [name for name, _ in ours.named_parameters()]
    ref_params = dict(ref.named_parameters())
    grads = torch.autograd.grad((y * dy.to(dtype)).sum(), inputs + [p for _, p in ours.named_parameters()])
    grads64 = torch.autograd.grad((y64 * dy).sum(), inputs64 + [ref_params[n] for n in names])
    for what, a, b in zip(["y", *(f"d input {i}" for i in range(len(inputs))), *(f"d {n}" for n in names)],
                          [y, *grads], [y64, *grads64], strict=True):
        tol = TOL[dtype]
        torch.testing.assert_close(a.double(), b, rtol=tol, atol=tol * b.abs().max().item(), msg=what)


DTYPES = [F64, F32]
ACTIVATIONS = {None: nn.Identity(), "gelu": nn.GELU(approximate="tanh"), "gelu_erf": nn.GELU(),
               "relu": nn.ReLU(), "silu": nn.SiLU()}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("activation,bias",
                         [(None, True), ("gelu", True), ("gelu_erf", False), ("silu", True)])
def test_linear(dtype, activation, bias):
    ref = randomize(nn.Linear(24, 40, bias))
    ours = Linear(24, 40, bias, activation=activation, dropout=0.3).double().eval()
    ours.load_state_dict(ref.state_dict())
    check(ours, ref, [(3, 7, 24)], dtype, ref_fn=lambda x: ACTIVATIONS[activation](ref(x)))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("activation,bias,residual", [("gelu", True, True), ("relu", False, False)])
def test_fused_mlp(dtype, activation, bias, residual):
    ref = randomize(TorchMLP(24, 56, ACTIVATIONS[activation], bias))
    ours = FusedMLP(24, 56, activation, bias).double()
    ours.load_state_dict(ref.state_dict())
    check(ours, ref, [(2, 9, 24)] + [(2, 9, 24)] * residual, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("residual", [False, True])
def test_swiglu_mlp(dtype, residual):
    ref = randomize(TorchSwiGLU(32, 40))
    ours = SwiGLUMLP(32, 40).double()
    ours.load_state_dict(ref.state_dict())
    check(ours, ref, [(17, 32)] + [(17, 32)] * residual, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize(("torch_norm", "module", "eps"), [(nn.RMSNorm, RMSNormLinear, 1e-6),
                                                           (nn.RMSNorm, RMSNormLinear, None),
                                                           (nn.LayerNorm, LayerNormLinear, 1e-5)])
def test_norm_linear(dtype, bias, torch_norm, module, eps):
    """eps=None (nn.RMSNorm's default): the input dtype's epsilon, as there."""
    ref = randomize(TorchNormLinear(torch_norm(40, eps=eps), nn.Linear(40, 24, bias)))
    ours = module(40, 24, eps=eps, bias=bias).double()
    ours.load_state_dict(ref.state_dict())
    check(ours, ref, [(3, 5, 40)], dtype)


def test_state_dict_names_and_shapes():
    """Each module's state dict has exactly the names and shapes of its torch counterpart."""
    pairs = [(Linear(8, 12, activation="gelu"), nn.Linear(8, 12)),
             (FusedMLP(8, 16, bias=False), TorchMLP(8, 16, nn.GELU(), bias=False)),
             (SwiGLUMLP(8, 16), TorchSwiGLU(8, 16)),
             (RMSNormLinear(8, 12), TorchNormLinear(nn.RMSNorm(8), nn.Linear(8, 12, bias=False))),
             (LayerNormLinear(8, 12), TorchNormLinear(nn.LayerNorm(8), nn.Linear(8, 12)))]
    for ours, ref in pairs:
        assert {k: v.shape for k, v in ours.state_dict().items()} == \
               {k: v.shape for k, v in ref.state_dict().items()}
        ours.load_state_dict(ref.state_dict())   # strict


def test_from_torch():
    """from_torch copies the torch module's parameters; the result computes the same function."""
    x = torch.randn(6, 16, dtype=F64)
    linear = randomize(nn.Linear(16, 8))
    torch.testing.assert_close(Linear.from_torch(linear, activation="relu")(x), F.relu(linear(x)))
    mlp = randomize(TorchMLP(16, 24, nn.GELU(approximate="tanh")))
    torch.testing.assert_close(FusedMLP.from_torch(mlp, "gelu")(x), mlp(x))
    swiglu = randomize(TorchSwiGLU(16, 24))
    torch.testing.assert_close(SwiGLUMLP.from_torch(swiglu)(x), swiglu(x))
    rms = randomize(TorchNormLinear(nn.RMSNorm(16, eps=1e-6), nn.Linear(16, 8)))
    torch.testing.assert_close(RMSNormLinear.from_torch(rms.norm, rms.linear)(x), rms(x))
    ln = randomize(TorchNormLinear(nn.LayerNorm(16), nn.Linear(16, 8)))
    converted = LayerNormLinear.from_torch(ln.norm, ln.linear)
    torch.testing.assert_close(converted(x), ln(x))
    assert converted.linear.weight is not ln.linear.weight   # a copy


@pytest.mark.parametrize("norm", [nn.LayerNorm(16, bias=False), nn.LayerNorm(16, elementwise_affine=False),
                                  nn.RMSNorm(16, elementwise_affine=False)],
                         ids=["ln_no_bias", "ln_plain", "rms_plain"])
def test_from_torch_norms_without_a_gain_or_a_bias(norm):
    """A norm without its gain or bias folds in too: the missing part is a constant one or zero
    (a buffer, not a parameter: it was a frozen parameter, in the state dict, which the torch
    pair's did not load strictly and `requires_grad_(True)` made trainable)."""
    x = torch.randn(6, 16, dtype=F64)
    ref = randomize(TorchNormLinear(norm, nn.Linear(16, 8)))
    fused_class = RMSNormLinear if isinstance(norm, nn.RMSNorm) else LayerNormLinear
    fused = fused_class.from_torch(ref.norm, ref.linear)
    torch.testing.assert_close(fused(x), ref(x))
    theirs = {f"norm.{name}" for name, _ in ref.norm.named_parameters()}
    assert {name for name, _ in fused.requires_grad_(True).named_parameters()} == theirs | {
        "linear.weight", "linear.bias"}
    assert fused.state_dict().keys() == ref.state_dict().keys()
    copy.deepcopy(ref).load_state_dict(fused.state_dict())   # strict, both ways
    fused.load_state_dict(ref.state_dict())
    torch.testing.assert_close(fused.float()(x.float()), ref.float()(x.float()))


class OnePlusGainRMSNorm(nn.Module):   # a gain of (1 + weight), as Gemma's, under LLaMA's names
    def __init__(self, dim: int):
        super().__init__()
        self.weight, self.variance_epsilon = nn.Parameter(torch.zeros(dim)), 1e-6

    def forward(self, x):
        return (1 + self.weight) * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)


def test_rms_norm_linear_from_hfs_llama_rms_norm():
    """HF's LlamaRMSNorm (no `eps`, no `normalized_shape`: `variance_epsilon` and its gain's
    length) folds in and computes what it and the linear compute; a module under the same names
    computing another formula is refused."""
    from transformers.models.llama.modeling_llama import LlamaRMSNorm
    x = torch.randn(6, 16, dtype=F64)
    ref = randomize(TorchNormLinear(LlamaRMSNorm(16, eps=1e-5), nn.Linear(16, 8)))
    # HF's norm rounds through float32: float32's tolerance
    fused = RMSNormLinear.from_torch(ref.norm, ref.linear)
    torch.testing.assert_close(fused(x), ref(x), rtol=1e-5, atol=1e-5)
    with pytest.raises(coda.CodaError, match="does not compute"):
        RMSNormLinear.from_torch(OnePlusGainRMSNorm(16), nn.Linear(16, 8))
    with pytest.raises(coda.CodaError, match=r"neither an nn\.RMSNorm"):
        RMSNormLinear.from_torch(nn.LayerNorm(16), nn.Linear(16, 8))


def test_from_torch_needs_a_norm_over_the_last_dimension():
    ref = TorchNormLinear(nn.LayerNorm((4, 16)), nn.Linear(16, 8))
    with pytest.raises(coda.CodaError, match=r"normalizes over \[4, 16\]"):
        LayerNormLinear.from_torch(ref.norm, ref.linear)


class BiasedSwiGLU(TorchSwiGLU):  # HF's LlamaMLP with mlp_bias=True
    def __init__(self, dim: int, hidden: int):
        super().__init__(dim, hidden)
        self.gate_proj = nn.Linear(dim, hidden)


class GeGLU(TorchSwiGLU):  # HF's LlamaMLP with hidden_act="gelu" (Gemma's MLP): an `act_fn`
    def __init__(self, dim: int, hidden: int):
        super().__init__(dim, hidden)
        self.act_fn = nn.GELU()


@pytest.mark.parametrize("module, match", [(BiasedSwiGLU(16, 24), "gate_proj carry a bias"),
                                           (GeGLU(16, 24), r"act_fn is GELU\(.*\), not SiLU")],
                         ids=["bias", "gelu"])
def test_swiglu_from_torch_refuses_what_it_would_drop(module, match):
    """SwiGLUMLP has no biases and computes silu(gate) * up: a source MLP with biases or another
    activation would convert into a different function, so it is refused."""
    with pytest.raises(coda.CodaError, match=match):
        SwiGLUMLP.from_torch(module)


class TimmMlp(nn.Module):   # timm's Mlp: fc1, act, drop1, norm, fc2, drop2 (exact GELU by default)
    def __init__(self, dim: int, hidden: int, act=None, norm=None, drop: float = 0.0):
        super().__init__()
        self.fc1, self.act, self.drop1 = nn.Linear(dim, hidden), act or nn.GELU(), nn.Dropout(drop)
        self.norm, self.fc2, self.drop2 = norm or nn.Identity(), nn.Linear(hidden, dim), nn.Dropout(drop)

    def forward(self, x):
        return self.drop2(self.fc2(self.norm(self.drop1(self.act(self.fc1(x))))))


@pytest.mark.parametrize("act, activation", [(nn.GELU(), "gelu_erf"), (nn.GELU(approximate="tanh"), "gelu"),
                                             (nn.ReLU(inplace=True), "relu"), (nn.SiLU(), "silu")])
def test_fused_mlp_from_torch_of_a_timm_mlp(act, activation):
    """timm's Mlp (an activation module, no-op norm and dropouts) converts when `activation`
    names what its act computes (an in-place one too) and computes what it computes."""
    mlp = randomize(TimmMlp(16, 24, act)).eval()
    x = torch.randn(6, 16, dtype=F64)
    torch.testing.assert_close(FusedMLP.from_torch(mlp, activation)(x), mlp(x))


@pytest.mark.parametrize("mlp, activation, match", [
    (TimmMlp(16, 24), "gelu", r"act \(GELU\(approximate='none'\)\) does not compute activation='gelu'"),
    (TimmMlp(16, 24, nn.Tanh()), "gelu_erf", r"act \(Tanh\(\)\) does not compute"),
    (TimmMlp(16, 24, norm=nn.LayerNorm(24)), "gelu_erf",
     r"norm \(LayerNorm\(.*\)\) does not compute.*no other layer between"),
    (TimmMlp(16, 24, drop=0.1), "gelu_erf", r"drop1 is Dropout\(p=0.1.*set its p to 0"),
], ids=["erf_as_tanh", "tanh", "norm", "dropout"])
def test_fused_mlp_from_torch_refuses_what_it_would_compute_otherwise(mlp, activation, match):
    """from_torch built whatever `activation` named (the tanh GELU by default) and dropped a
    norm or dropout between fc1 and fc2: a different function, silently (the tanh GELU for
    timm's exact one: 1.5e-4 relative; a LayerNorm: 0.68)."""
    with pytest.raises(coda.CodaError, match=match):
        FusedMLP.from_torch(mlp, activation)


def test_fused_mlp_from_torch_refuses_an_fc2_of_another_width():
    mlp = TorchMLP(16, 24, nn.GELU(approximate="tanh"))
    mlp.fc2 = nn.Linear(24, 5)
    with pytest.raises(coda.CodaError, match="fc2 maps 24 features to 5; FusedMLP's maps fc1's 24 back to "):
        FusedMLP.from_torch(mlp, "gelu")


def test_norm_linear_from_torch_refuses_a_norm_of_the_other_formula():
    """LayerNormLinear folded an RMSNorm in as a LayerNorm (0.39 relative error, silently) and
    met HF's LlamaRMSNorm with an AttributeError."""
    from transformers.models.llama.modeling_llama import LlamaRMSNorm
    for norm in (nn.RMSNorm(16), LlamaRMSNorm(16)):
        with pytest.raises(coda.CodaError, match=r"is not an nn\.LayerNorm \(an RMSNorm folds in with "
                                                 r"RMSNormLinear\.from_torch\)"):
            LayerNormLinear.from_torch(norm, nn.Linear(16, 8))


def test_swiglu_from_torch_takes_an_in_place_silu():
    """SiLU(inplace=True) was refused: the probe it overwrote was then compared with silu of itself."""
    swiglu = randomize(TorchSwiGLU(16, 24))
    swiglu.act_fn = nn.SiLU(inplace=True)
    x = torch.randn(6, 16, dtype=F64)
    torch.testing.assert_close(SwiGLUMLP.from_torch(swiglu)(x), swiglu(x))


def test_fused_mlp_from_torch_refuses_a_bias_in_one_layer_only():
    mlp = TorchMLP(16, 24, nn.GELU(approximate="tanh"))
    mlp.fc2 = nn.Linear(24, 16, bias=False)
    with pytest.raises(coda.CodaError, match="bias in only one of fc1 and fc2"):
        FusedMLP.from_torch(mlp, "gelu")


class ForwardReluMLP(nn.Module):   # the activation called in forward(), no module of its own
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(dim, hidden), nn.Linear(hidden, dim)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


class ForwardGeGLU(TorchSwiGLU):   # a GeGLU whose GELU is called in forward()
    def forward(self, x, residual=None):
        return self.down_proj(F.gelu(self.gate_proj(x)) * self.up_proj(x))


def test_from_torch_probes_the_whole_module():
    """Only children were checked: an activation called in forward() converted into the default
    one (0.097 off at outputs of 0.52, a GeGLU into SwiGLU 0.075 off): silently (audit's find)."""
    with pytest.raises(coda.CodaError, match="ForwardReluMLP does not compute fc2\\(activation"):
        FusedMLP.from_torch(ForwardReluMLP(16, 24))
    mlp = randomize(ForwardReluMLP(16, 24))
    x = torch.randn(6, 16, dtype=F64)
    torch.testing.assert_close(FusedMLP.from_torch(mlp, "relu")(x), mlp(x))
    with pytest.raises(coda.CodaError, match="ForwardGeGLU does not compute down_proj\\(silu"):
        SwiGLUMLP.from_torch(ForwardGeGLU(16, 24))


@pytest.mark.parametrize("convert, module, match", [
    (Linear.from_torch, nn.Conv1d(4, 4, 1), "Linear.from_torch takes an nn.Linear, got Conv1d"),
    (FusedMLP.from_torch, nn.Sequential(nn.Linear(4, 8), nn.GELU()),
     "Sequential has no nn.Linear children named fc1, fc2 \\(it has: 0, 1\\)"),
    (SwiGLUMLP.from_torch, nn.Linear(4, 8), "Linear has no nn.Linear children named gate_proj, up_proj"),
])
def test_from_torch_of_another_kind_of_module_is_a_coda_error(convert, module, match):
    with pytest.raises(coda.CodaError, match=match):
        convert(module)


def test_dropout_only_in_training():
    torch.manual_seed(0)
    layer = Linear(16, 32, dropout=0.5).double()
    x = torch.randn(8, 16, dtype=F64)
    torch.testing.assert_close(layer.eval()(x), F.linear(x, layer.weight, layer.bias))
    y = layer.train()(x)
    dropped = (y == 0).double().mean().item()
    assert 0.3 < dropped < 0.7


@pytest.mark.parametrize(("make", "words"), [
    (lambda: Linear(4, 4, dropout=1.5), "dropout must be a number in \\[0, 1\\], got 1.5"),
    (lambda: Linear(4, 4, activation="swish"), "activation must be one of"),
    (lambda: FusedMLP(4, 8, dropout=-0.1), "dropout must be a number in"),
    (lambda: FusedMLP(4, 8, activation="tanh"), "activation must be one of"),
])
def test_bad_options_are_refused_when_built(make, words):
    """They were read only by a training-mode forward: a model built with dropout=1.5 evaluated
    fine and failed when training began."""
    with pytest.raises(coda.CodaError, match=words):
        make()


class ScaledLinear(nn.Linear):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 2.0 * super().forward(x)


class ShiftedLayerNorm(nn.LayerNorm):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) + 1.0


@pytest.mark.parametrize(("convert", "match"), [
    (lambda: Linear.from_torch(ScaledLinear(8, 6)), "ScaledLinear has a forward of its own"),
    (lambda: Linear.from_torch(Linear(8, 6, activation="relu", dropout=0.2)),
     "coda.nn.modules.Linear has a forward of its own"),
    (lambda: LayerNormLinear.from_torch(nn.LayerNorm(8), ScaledLinear(8, 6)), "ScaledLinear has a forward"),
    (lambda: LayerNormLinear.from_torch(ShiftedLayerNorm(8), nn.Linear(8, 6)), "ShiftedLayerNorm has a"),
    (lambda: LayerNormLinear.from_torch(nn.LayerNorm(8), nn.Conv1d(8, 6, 1)), "an nn.Linear, got Conv1d"),
    (lambda: RMSNormLinear.from_torch(nn.RMSNorm(8), nn.Identity()), "takes an nn.Linear, got Identity"),
    (lambda: FusedMLP.from_torch(FusedMLP(8, 16).to("meta")), "FusedMLP is on the meta device"),
    (lambda: SwiGLUMLP.from_torch(SwiGLUMLP(8, 16).to("meta")), "SwiGLUMLP is on the meta device"),
])
def test_from_torch_refuses_what_would_compute_otherwise_or_cannot_be_probed(convert, match):
    """A subclass whose forward adds to its layer's formula converted silently (outputs 0.7-1.3
    off: a coda.nn.Linear's activation and dropout dropped, a scale lost); a non-Linear `linear`
    and a meta module to be probed raised AttributeError / NotImplementedError."""
    with pytest.raises(coda.CodaError, match=match):
        convert()
