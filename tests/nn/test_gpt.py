"""coda.nn.GPT: the CODA model against the same model in eager PyTorch (same parameters).

- float64 on the reference backend: the loss, the logits and every parameter's gradient agree to
  rounding;
- float32 through the Triton interpreter (the real kernels): close to the float64 eager model;
- a few AdamW steps decrease the loss; state_dict round trips (also between CODA and eager);
- generation runs and matches between the two paths.
"""

from __future__ import annotations

import io
import itertools

import pytest
import torch

import coda
from coda.nn import GPT, PRESETS, GPTConfig

F64 = torch.float64
CONFIG = GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=16)


def model(config=CONFIG, seed=0, dtype=F64, fused=True):
    torch.manual_seed(seed)
    return GPT(config, fused=fused).to(dtype)


def tokens(shape, seed=1):
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, CONFIG.vocab_size, shape, generator=gen)


def loss_and_grads(m, idx, targets):
    m.zero_grad()
    loss = m(idx, targets)
    loss.backward()
    return loss.detach(), {name: p.grad.clone() for name, p in m.named_parameters()}


def rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


@pytest.mark.parametrize("t, ids", [(16, torch.int64), (11, torch.int64), (11, torch.int32)])
def test_fused_matches_eager_float64(t, ids):
    """The whole context and fewer positions; int32 tokens too (the eager twin's F.cross_entropy
    refused int32 targets, which the model's check and the fused head take)."""
    m = model()
    idx, targets = tokens((2, t)).to(ids), tokens((2, t), seed=2).to(ids)
    loss, grads = loss_and_grads(m, idx, targets)
    m.fused = False
    loss_ref, grads_ref = loss_and_grads(m, idx, targets)
    assert loss.dtype == F64
    torch.testing.assert_close(loss, loss_ref, rtol=1e-13, atol=0)
    assert grads.keys() == grads_ref.keys()
    for name, g in grads.items():
        assert rel(g, grads_ref[name]) < 1e-12, name


def test_fused_close_to_float64_in_float32():
    """float32 through the Triton interpreter on a CPU machine (conftest.py), the kernels on a GPU."""
    m64 = model()
    m32 = model(dtype=torch.float32)
    m32.load_state_dict(m64.state_dict())
    idx, targets = tokens((2, 16)), tokens((2, 16), seed=2)
    loss, grads = loss_and_grads(m32, idx, targets)
    m64.fused = False
    loss_ref, grads_ref = loss_and_grads(m64, idx, targets)
    # float32: every GEMM and epilogue rounds at ~6e-8 relative; a few dozen roundings in a row.
    assert abs(loss.item() - loss_ref.item()) < 1e-5 * loss_ref.item()
    for name, g in grads.items():
        assert rel(g, grads_ref[name]) < 1e-5, name
    with torch.no_grad():
        assert rel(m32(idx), m64(idx)) < 1e-5


def test_logits_and_generation_match_eager():
    m = model()
    idx = tokens((2, 9))
    with torch.no_grad():
        logits = m(idx)
        m.fused = False
        logits_ref = m(idx)
    assert logits.shape == (2, 9, CONFIG.vocab_size)
    torch.testing.assert_close(logits, logits_ref, rtol=1e-12, atol=1e-12)
    # 20 new tokens: the context slides past block_size (16) on the way.
    out = {}
    for fused in (True, False):
        m.fused = fused
        out[fused] = m.generate(idx[:1], 20, top_k=10, generator=torch.Generator().manual_seed(3))
    assert out[True].shape == (1, 29)
    assert torch.equal(out[True], out[False])


def test_training_steps_decrease_the_loss():
    m = model()   # float64: the reference backend, fast on a CPU
    optimizer = torch.optim.AdamW(m.parameters(), lr=3e-3)
    idx, targets = tokens((4, 16)), tokens((4, 16), seed=2)
    losses = []
    for _ in range(8):
        loss = m(idx, targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] - 0.3, losses
    assert all(b < a for a, b in itertools.pairwise(losses)), losses


def test_state_dict_round_trip():
    m = model()
    state = m.state_dict()
    assert "wte.weight" in state and not any("head" in k for k in state)   # the head is tied
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    other = model(seed=7, fused=False)
    idx, targets = tokens((2, 16)), tokens((2, 16), seed=2)
    assert other(idx, targets) != m(idx, targets)
    other.load_state_dict(torch.load(buffer))
    for k, v in other.state_dict().items():
        assert torch.equal(v, state[k]), k
    torch.testing.assert_close(other(idx, targets), m(idx, targets), rtol=1e-13, atol=0)
    assert other.wte.weight.data_ptr() != m.wte.weight.data_ptr()


def test_presets_and_sizes():
    assert PRESETS["tiny"].n_embd % PRESETS["tiny"].n_head == 0
    c = PRESETS["gpt2"]
    assert (c.n_layer, c.n_head, c.n_embd, c.block_size) == (12, 12, 768, 1024)
    # 12 C² + 13 C per block, the embeddings, ln_f
    tiny = PRESETS["tiny"]
    expected = tiny.n_layer * (12 * tiny.n_embd**2 + 13 * tiny.n_embd) + (
        tiny.vocab_size + tiny.block_size + 2) * tiny.n_embd
    assert GPT(tiny).num_params() == expected


@pytest.mark.parametrize(("idx", "words"), [
    (tokens((1, 17)), "sequence length 17; expected 1 to the context \\(block_size 16\\)"),
    (tokens((2, 0)), "sequence length 0"),
    (tokens((5,)), "idx must be an int64 or int32 tensor \\[B, T\\]"),
    (tokens((2, 5)).double(), "idx must be an int64 or int32 tensor"),
    (torch.full((2, 5), 256), "outside \\[0, 256\\) \\(vocab_size\\): they range from 256 to 256"),
    (torch.full((2, 5), -1), "outside \\[0, 256\\)"),
])
def test_bad_tokens_are_refused_naming_idx(idx, words):
    """Tokens a model cannot embed are a CodaError naming idx, not nn.Embedding's IndexError, a
    view's error inside attention (T = 0) or a ValueError."""
    with pytest.raises(coda.CodaError, match=words):
        model(fused=False)(idx)
    with pytest.raises(coda.CodaError, match=words):
        model()(idx, idx)


@pytest.mark.parametrize(("option", "words"), [
    (dict(temperature=0.0), "temperature must be a positive number, got 0.0"),
    (dict(top_k=0), "top_k must be None or a positive int, got 0"),
    (dict(new_tokens=-3), "new_tokens must be an int >= 0, got -3"),
    (dict(new_tokens=2.5), "new_tokens must be an int >= 0, got 2.5"),
])
def test_generate_refuses_what_it_cannot_sample(option, words):
    """A zero temperature (logits / 0) or top_k (no token kept) failed inside torch.multinomial; a
    negative count of new tokens returned the prompt, a fractional one was range()'s TypeError."""
    with pytest.raises(coda.CodaError, match=words):
        model().generate(tokens((1, 4)), **{"new_tokens": 2, **option})


@pytest.mark.parametrize("fused", [True, False])
def test_an_empty_batch_runs(fused):
    """B = 0 passes the token checks; the attention's view inferred a -1 head size from no
    elements and raised PyTorch's error. Logits [0, T, V] and, with targets, the mean of no
    losses (NaN, as torch's cross_entropy of an empty batch), fused and in the eager twin."""
    m = model(fused=fused)
    idx = torch.zeros(0, 5, dtype=torch.long)
    assert m(idx).shape == (0, 5, CONFIG.vocab_size)
    assert m(idx, idx).isnan()
