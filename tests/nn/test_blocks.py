"""coda.nn blocks (LlamaBlock, BertLayer): the fused path against its eager twin (`fused=False`, plain
PyTorch on the same parameters).

Forward and every gradient (input and each parameter) are compared:
- float64, reference backend, both paths in float64, to 1e-10;
- float32 through the Triton interpreter (the fused path) against the eager twin in float64, to
  2e-4 of each tensor's largest magnitude: a block is ~6 GEMMs plus attention and two norms deep,
  each float32 step adding ~1e-6 relative (u = 6e-8 over reductions of <= 96 terms); the
  measured error is ~1e-5, so 2e-4 leaves a 10x margin.
The LLaMA test also chains two blocks through `sumsq` (the first block's `stats=True` output feeding
the second's input RMSNorm), which exercises the gradient bridge of `_RmsScale`.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import coda
import oracle
from coda.nn import BertLayer, LlamaBlock
from coda.ops import permute_for_interleaved_rope

F64, F32 = torch.float64, torch.float32
TOL = {F64: 1e-10, F32: 2e-4}


def randomize(module: nn.Module, seed: int = 0) -> nn.Module:
    return oracle.randomize(module, scale=0.2, vector_offset=1.0, seed=seed)


def compare(run, blocks: list[nn.Module], shape: tuple[int, ...], dtype: torch.dtype) -> None:
    """run(blocks, x, fused) -> y; fused in dtype against eager in float64, all gradients by name."""
    fused_blocks = [copy.deepcopy(b).to(dtype) for b in blocks]
    gen = torch.Generator().manual_seed(1)
    x64 = torch.randn(shape, generator=gen, dtype=F64).requires_grad_()
    x = x64.detach().to(dtype).requires_grad_()
    y, y64 = run(fused_blocks, x, True), run(blocks, x64, False)
    dy = torch.randn(y64.shape, generator=gen, dtype=F64)
    params = [p for b in fused_blocks for p in b.parameters()]
    params64 = [p for b in blocks for p in b.parameters()]
    grads = torch.autograd.grad((y * dy.to(dtype)).sum(), [x, *params])
    grads64 = torch.autograd.grad((y64 * dy).sum(), [x64, *params64])
    names = ["y", "dx", *(f"d block{i}.{n}" for i, b in enumerate(blocks) for n, _ in b.named_parameters())]
    tol = TOL[dtype]
    for name, a, b in zip(names, [y, *grads], [y64, *grads64], strict=True):
        scale = max(b.abs().max().item(), 1e-2)   # the key bias gradient is 0 in exact arithmetic
        torch.testing.assert_close(a.double(), b, rtol=tol, atol=tol * scale, msg=name)


@pytest.mark.parametrize("dtype", [F64, F32])
@pytest.mark.parametrize("n_kv_heads", [4, 2])
def test_llama_block(dtype, n_kv_heads):
    block = randomize(LlamaBlock(32, 4, n_kv_heads, 48))
    compare(lambda bs, x, fused: bs[0](x, fused=fused), [block], (2, 5, 32), dtype)


@pytest.mark.parametrize("dtype", [F64, F32])
def test_llama_blocks_chained_through_sumsq(dtype):
    blocks = [randomize(LlamaBlock(32, 4, 2, 40), seed=s) for s in (0, 1)]

    def run(bs, x, fused):
        y, ss = bs[0](x, stats=True, fused=fused)
        return bs[1](y, sumsq=ss if fused else None, fused=fused)

    compare(run, blocks, (2, 6, 32), dtype)


@pytest.mark.parametrize("eps", [0.5, None], ids=["set_on_the_norms", "none"])
def test_llama_block_takes_eps_from_its_norms(eps):
    """The fused path reads each RMSNorm's eps, as the eager twin (the norm modules) does: eps set
    on the norms after building counts in both (the fused path read the block's own and differed
    by 8% here), and None (the input dtype's epsilon, as nn.RMSNorm's) runs fused too."""
    block = randomize(LlamaBlock(16, 2, 1, 24))
    x = torch.randn(2, 3, 16, dtype=F64)
    before = block(x)
    block.input_layernorm.eps = block.post_attention_layernorm.eps = eps
    torch.testing.assert_close(block(x), block(x, fused=False), rtol=1e-10, atol=1e-10)
    if eps is not None:   # and it counts
        assert not torch.allclose(block(x), before, rtol=1e-3, atol=0)


def test_an_rms_norm_without_eps_takes_its_compute_types_epsilon():
    """nn.RMSNorm(eps=None) on bfloat16 (or float16) rows takes float32's epsilon, the dtype
    PyTorch computes in, not bfloat16's 2**-7, which the fused modules took: at rows of scale
    0.05 (mean of squares 2.5e-3) that changed the output by about a third."""
    from coda.nn import RMSNormLinear

    torch.manual_seed(3)
    norm, linear = nn.RMSNorm(64), nn.Linear(64, 32, bias=False)
    x = torch.randn(8, 64) * 0.05
    fused = RMSNormLinear.from_torch(norm, linear)
    assert fused.norm.eps is None
    exact = linear.double()(norm.double()(x.double()))
    for dtype in (torch.bfloat16, torch.float16):
        got = fused.to(dtype)(x.to(dtype)).double()
        eager = linear.to(dtype)(norm.to(dtype)(x.to(dtype))).double()
        assert (got - exact).norm() <= 2 * (eager - exact).norm() + 1e-3 * exact.norm(), dtype


def test_llama_stats_and_names():
    block = randomize(LlamaBlock(16, 2, 1, 24))
    x = torch.randn(1, 3, 16, dtype=F64)
    (y, ss), (_, sse) = block(x, stats=True), block(x, stats=True, fused=False)
    torch.testing.assert_close(ss, (y * y).sum(-1))
    torch.testing.assert_close(ss, sse)
    assert set(block.state_dict()) == {
        "input_layernorm.weight", "post_attention_layernorm.weight",
        *(f"self_attn.{p}_proj.weight" for p in "qkvo"),
        *(f"mlp.{p}_proj.weight" for p in ("gate", "up", "down"))}


def test_llama_matches_rotate_half_after_permutation():
    """An HF-style (rotate_half) block equals ours after permute_for_interleaved_rope of q and k."""
    block = randomize(LlamaBlock(16, 2, 1, 24))
    x = torch.randn(1, 5, 16, dtype=F64)
    d = block.head_dim
    half = {"q_proj": block.self_attn["q_proj"].weight.detach().clone(),
            "k_proj": block.self_attn["k_proj"].weight.detach().clone()}
    permuted = copy.deepcopy(block)
    with torch.no_grad():
        for name, n in (("q_proj", 2), ("k_proj", 1)):
            permuted.self_attn[name].weight.copy_(permute_for_interleaved_rope(half[name], n, d))

    def rotate_half_reference(x):   # q, k with rotate_half RoPE, written here
        from coda.nn.llama import rope_tables
        cos, sin = rope_tables(torch.arange(x.shape[1]), d, dtype=F64)
        cos, sin = torch.cat((cos, cos), -1)[:, None], torch.cat((sin, sin), -1)[:, None]
        attn = block.self_attn
        h = block.input_layernorm(x)
        q, k, v = (attn[f"{p}_proj"](h).unflatten(-1, (-1, d)) for p in "qkv")

        def rot(t):
            return t * cos + torch.cat((-t[..., d // 2:], t[..., :d // 2]), -1) * sin

        a = x + attn["o_proj"](block.attend(rot(q), rot(k), v))
        h = block.post_attention_layernorm(a)
        return a + block.mlp.down_proj(nn.functional.silu(block.mlp.gate_proj(h)) * block.mlp.up_proj(h))

    torch.testing.assert_close(permuted(x), rotate_half_reference(x))


@pytest.mark.parametrize("dtype", [F64, F32])
@pytest.mark.parametrize("masked", [False, True])
def test_bert_layer(dtype, masked):
    layer = randomize(BertLayer(32, 4, 56, eps=1e-12))
    mask = torch.ones(2, 1, 1, 7, dtype=torch.bool)
    mask[1, ..., 5:] = False   # padding in the second sequence

    def run(bs, x, fused):
        return bs[0](x, attention_mask=mask if masked else None, fused=fused)

    compare(run, [layer], (2, 7, 32), dtype)


def test_bert_names_and_dropout():
    layer = randomize(BertLayer(16, 2, 24, dropout=0.5))
    assert set(layer.state_dict()) == {
        *(f"attention.self.{n}.{p}" for n in ("query", "key", "value") for p in ("weight", "bias")),
        *(f"{m}.{p}" for m in ("attention.output.dense", "attention.output.LayerNorm", "intermediate.dense",
                                "output.dense", "output.LayerNorm") for p in ("weight", "bias"))}
    x = torch.randn(2, 4, 16, dtype=F64)
    torch.testing.assert_close(layer.eval()(x), layer(x, fused=False))
    torch.manual_seed(0)
    assert not torch.allclose(layer.train()(x), layer.eval()(x))


@pytest.mark.parametrize("activation", [None, "silu", "squared_relu", "relu"])
def test_bert_layer_eager_twin_has_every_activation_of_the_fused_path(activation):
    """The eager twin knew only the GELUs and ReLU: fused=False with an activation coda.ops.linear
    takes was a KeyError."""
    layer = randomize(BertLayer(16, 2, 24, activation=activation))
    compare(lambda bs, x, fused: bs[0](x, fused=fused), [layer], (2, 3, 16), F64)


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("make", [lambda: LlamaBlock(16, 4, 2, 24), lambda: BertLayer(16, 4, 24)])
@pytest.mark.parametrize("shape", [(5, 16), (2, 5, 12), (1, 2, 5, 16)])
def test_blocks_refuse_an_input_not_b_t_dim(make, shape, fused):
    """x [T, dim] or of another width failed inside an op with a message about a rope table's or a
    weight's shape (the fused path), or inside attention (the eager twin)."""
    with pytest.raises(coda.CodaError, match=r"x must be a floating-point tensor \[B, T, 16\]"):
        make()(torch.randn(shape), fused=fused)


@pytest.mark.parametrize(("make", "words"), [
    (lambda: LlamaBlock(6, n_heads=2, n_kv_heads=2, hidden=8), "head dimension 6 // 2 = 3 must be even"),
    (lambda: BertLayer(16, n_heads=2, hidden=24, activation="tanh"), "activation must be one of"),
    (lambda: BertLayer(16, n_heads=2, hidden=24, dropout=1.5), "dropout must be a number in"),
    (lambda: LlamaBlock(24, n_heads=3, n_kv_heads=2, hidden=32), "n_kv_heads=2 must divide n_heads=3"),
    (lambda: LlamaBlock(24, n_heads=5, n_kv_heads=5, hidden=32), "n_heads=5 must divide the model width 24"),
    (lambda: BertLayer(30, n_heads=4, hidden=32), "n_heads=4 must divide the model width 30"),
    (lambda: coda.nn.GPT(coda.nn.GPTConfig(n_embd=130, n_head=4)), "n_heads=4 must divide the model width"),
    (lambda: LlamaBlock(16, 2, 1, 24, rope_theta=0.0), "rope_theta must be a positive number, got 0.0"),
    (lambda: LlamaBlock(16, 2, 1, 24, rope_theta=-1e4), "rope_theta must be a positive number"),
])
def test_head_counts_their_attention_cannot_run_are_refused(make, words):
    """A block whose heads do not split its width (or its query heads into key/value groups) is
    refused when built, not by SDPA's or a view's error in its first forward; so is a RoPE base
    whose tables would be NaN (which CPU attention turned into zeros, silently)."""
    with pytest.raises(coda.CodaError, match=words):
        make()
