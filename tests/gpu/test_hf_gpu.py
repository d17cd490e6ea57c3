"""`coda.patch` on HuggingFace GPT-2, LLaMA and BERT at real widths, bf16, on a CUDA GPU (skipped
without one): the patched model's loss and every parameter gradient are within 2x the error of the
unpatched model in bf16, both against the unpatched model in float64 with the same parameters.

Real widths (GPT-2 768 / vocab 50257, LLaMA-style 2048 / ffn 5632 / 16 q and 4 kv heads / vocab
32000, BERT-base 768 / vocab 30522) and 8192 tokens; two layers each (the layers are alike).
GPT-2's odd vocabulary at 8192 tokens takes the Hopper kernel's split epilogue over a ragged last
tile (the case that gave a NaN loss before the fix).
"""

from __future__ import annotations

import copy
import fcntl
import gc
import tempfile
import types
from pathlib import Path

import pytest
import torch
from accuracy import assert_within_eager

import coda

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
transformers = pytest.importorskip("transformers")


@pytest.fixture(autouse=True)
def one_model_at_a_time():
    """A float64 LLaMA-width copy with its 8192 x 32000 logits takes ~25 GiB: under pytest-xdist
    the model tests of all workers at once would not fit one GPU, so they take turns (a file lock
    across worker processes), and each gives its cached memory back before the next starts."""
    with open(Path(tempfile.gettempdir()) / "coda-hf-gpu-tests.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            gc.collect()
            torch.cuda.empty_cache()


def exact_rms_norm(self, h: torch.Tensor) -> torch.Tensor:
    """LlamaRMSNorm in the input's dtype (HF's round trip through float32 would make the float64
    reference a float32 one); GemmaRMSNorm's gain is 1 + weight."""
    if type(self).__name__ in ("GemmaRMSNorm", "Gemma2RMSNorm", "Gemma3RMSNorm"):
        return (1 + self.weight) * h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
    return self.weight * h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)


def build(family: str) -> tuple[torch.nn.Module, tuple[int, int]]:
    """A float32 model with random weights (non-trivial norm gains) and its (batch, sequence)."""
    torch.manual_seed(0)
    common = dict(attn_implementation="sdpa")
    if family == "gpt2":
        config = transformers.GPT2Config(n_embd=768, n_layer=2, n_head=12, vocab_size=50257,
                                         n_positions=1024, resid_pdrop=0.0, embd_pdrop=0.0,
                                         attn_pdrop=0.0, use_cache=False, **common)
        model, shape = transformers.GPT2LMHeadModel(config), (8, 1024)
    elif family in ("llama", "mistral", "qwen2", "qwen3", "phi3", "gemma"):   # Mistral: a sliding
        # window; Qwen2: q/k/v biases; Qwen3: q and k normalized per head; Phi-3: fused weights;
        # Gemma: GeGLU, 1 + weight gains, a scaled embedding, Gemma-2B's heads (8 of 256, one kv)
        name = {"llama": "Llama", "mistral": "Mistral", "qwen2": "Qwen2", "qwen3": "Qwen3",
                "phi3": "Phi3", "gemma": "Gemma"}[family]
        heads = dict(num_attention_heads=16, num_key_value_heads=4)
        extra = {"mistral": dict(sliding_window=1024), "phi3": dict(pad_token_id=0),
                 "gemma": dict(num_attention_heads=8, num_key_value_heads=1, head_dim=256)}.get(family, {})
        config = getattr(transformers, f"{name}Config")(
            hidden_size=2048, intermediate_size=5632, num_hidden_layers=2, vocab_size=32000,
            max_position_embeddings=2048, use_cache=False, **common, **(heads | extra))
        model, shape = getattr(transformers, f"{name}ForCausalLM")(config), (4, 2048)
    elif family in ("gemma2", "gemma3"):   # Gemma-2-2B's and Gemma-3-1B's layer widths, vocab 32000
        name, size = {
            "gemma2": ("Gemma2Config", dict(hidden_size=2304, intermediate_size=9216, num_attention_heads=8,
                                            num_key_value_heads=4, attn_logit_softcapping=50.0,
                                            final_logit_softcapping=30.0)),
            "gemma3": ("Gemma3TextConfig", dict(hidden_size=1152, intermediate_size=6912,
                                                num_attention_heads=4, num_key_value_heads=1))}[family]
        config = getattr(transformers, name)(
            **size, head_dim=256, num_hidden_layers=2, vocab_size=32000, sliding_window=512,
            max_position_embeddings=2048, use_cache=False, **common)
        cls = transformers.Gemma2ForCausalLM if family == "gemma2" else transformers.Gemma3ForCausalLM
        model, shape = cls(config), (4, 2048)
    else:
        config = transformers.BertConfig(hidden_size=768, num_hidden_layers=2, num_attention_heads=12,
                                         intermediate_size=3072, vocab_size=30522,
                                         hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                                         **common)
        model, shape = transformers.BertForMaskedLM(config), (16, 512)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1 and ("norm" in name.lower() or "ln" in name) and name.endswith("weight"):
                p.add_(0.2 * torch.randn_like(p))
    return model.eval(), shape


def batch(family: str, shape: tuple[int, int], vocab: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, vocab, shape, generator=g)
    labels = ids.clone()
    if family == "bert":   # masked LM: 15% of the positions carry a label
        labels[torch.rand(shape, generator=g) > 0.15] = -100
    else:
        labels[:, ::97] = -100
    return {"input_ids": ids.cuda(), "labels": labels.cuda()}


def loss_and_grads(model: torch.nn.Module, inputs: dict) -> tuple[torch.Tensor, dict]:
    model.zero_grad(set_to_none=True)
    loss = model(**inputs).loss
    loss.backward()
    return loss.detach(), {n: p.grad.detach().clone() for n, p in model.named_parameters()
                           if p.grad is not None}


@pytest.mark.parametrize("family", ["gpt2", "llama", "bert", "mistral", "qwen2", "qwen3", "phi3", "gemma",
                                    "gemma2", "gemma3"])
def test_patched_model_bf16_within_eager_error(family):
    model, shape = build(family)
    inputs = batch(family, shape, model.config.vocab_size)
    exact = copy.deepcopy(model).cuda().double()
    for module in exact.modules():
        if type(module).__name__.endswith("RMSNorm"):
            module.forward = types.MethodType(exact_rms_norm, module)
    eager = copy.deepcopy(model).cuda().to(torch.bfloat16)
    patched = coda.patch(copy.deepcopy(model).cuda().to(torch.bfloat16))
    loss_exact, grads_exact = loss_and_grads(exact, inputs)
    loss_eager, grads_eager = loss_and_grads(eager, inputs)
    loss, grads = loss_and_grads(patched, inputs)
    # A mean over thousands of tokens averages the rounding errors away, and the ratio of two
    # such averages is noise: a floor of 1e-4 relative, 40x below bf16's resolution.
    assert_within_eager(f"{family} loss", loss, loss_eager, loss_exact, floor=1e-4)
    assert grads.keys() == grads_eager.keys()
    for name, g in grads.items():
        if grads_exact[name].abs().max() > 0:   # rows of embeddings no token used stay zero
            assert_within_eager(f"{family} d{name}", g, grads_eager[name], grads_exact[name])


@pytest.mark.parametrize("family", ["gpt2", "llama", "bert", "gemma"])
def test_patched_model_under_autocast_within_eager_error(family):
    """A float32 model under torch.autocast(bfloat16), as HF's Trainer with bf16=True runs it: the
    patched model's loss and float32 gradients within 2x eager autocast's error."""
    model, shape = build(family)
    inputs = batch(family, shape, model.config.vocab_size)
    loss_exact, grads_exact = loss_and_grads(copy.deepcopy(model).cuda().double(), inputs)

    def autocast_loss_and_grads(m):   # the forward under autocast, the backward outside it
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = m(**inputs).loss
        loss.backward()
        return loss.detach(), {n: p.grad for n, p in m.named_parameters() if p.grad is not None}
    loss_eager, grads_eager = autocast_loss_and_grads(copy.deepcopy(model).cuda())
    loss, grads = autocast_loss_and_grads(coda.patch(copy.deepcopy(model).cuda()))
    assert all(g.dtype == torch.float32 for g in grads.values())
    assert_within_eager(f"{family} autocast loss", loss, loss_eager, loss_exact, floor=1e-4)
    for name, g in grads.items():
        if grads_exact[name].abs().max() > 0:
            assert_within_eager(f"{family} autocast d{name}", g, grads_eager[name], grads_exact[name])
