"""`coda.patch` on tiny random HuggingFace LLaMA, GPT-2 and BERT models: the patched model's loss and every
parameter gradient match the unpatched model's, and the state_dict is untouched.

float64 runs the reference backend; float32 the real Triton kernels through the interpreter.
"""

from __future__ import annotations

import copy
import threading

import pytest
import torch

import coda

transformers = pytest.importorskip("transformers")

VOCAB, SEQ, BATCH = 128, 16, 2


def tiny_llama(dtype: torch.dtype, family: str = "Llama", exact_norms: bool = True,
               config_name: str | None = None, **overrides) -> torch.nn.Module:
    """A tiny LLaMA, or one of the models built the same way (`family` "Mistral", "Qwen2"), its
    config class `{family}Config` unless named; with `exact_norms` its RMSNorms compute in the
    model's dtype (HF's go through float32)."""
    torch.manual_seed(0)
    config = getattr(transformers, config_name or f"{family}Config")(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        attn_implementation="eager", **overrides)
    model = getattr(transformers, f"{family}ForCausalLM")(config).to(dtype).eval()
    for module in model.modules():  # HF's RMSNorm computes in float32 even for a float64 model
        if exact_norms and type(module).__name__ == f"{family}RMSNorm":   # (a class of that name,
            cls = type(module)                                             # as coda.patch looks for)
            module.__class__ = type(cls.__name__, (cls,), {"forward": exact_rms_norm,
                                                            "__module__": cls.__module__})
    with torch.no_grad():  # non-trivial norm gains, so that folding them into weights is tested
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):   # Qwen3's q_norm and k_norm too
                p.add_(0.3 * torch.randn_like(p))
    return model


def exact_rms_norm(self, h: torch.Tensor) -> torch.Tensor:
    """HF's LlamaRMSNorm in the input's dtype (no float32 round trip); Gemma's scales by
    1 + weight."""
    if type(self).__name__ in ("GemmaRMSNorm", "Gemma2RMSNorm", "Gemma3RMSNorm"):
        return (1 + self.weight) * h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
    return self.weight * h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)
    labels = ids.clone()
    labels[0, 3] = labels[1, 7] = -100  # ignored positions
    return ids, labels


def reference_loss(model: torch.nn.Module, ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """HF's shifted causal-LM loss, in the model's dtype (HF itself upcasts logits to float32)."""
    logits = model(input_ids=ids).logits
    shifted = torch.cat((labels[:, 1:], torch.full_like(labels[:, :1], -100)), dim=1)
    return torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), shifted.reshape(-1))

def assert_causal_lm_matches(ref, tol: float, skip_ignored_labels: bool | None = None,
                             op: str = "out_proj_residual") -> None:
    """The patched copy's loss (with no logits written) and every parameter gradient match;
    skipping the ignored rows, half of them are (a fine-tuning batch's prompts)."""
    model = coda.patch(copy.deepcopy(ref), skip_ignored_labels=skip_ignored_labels)
    assert_causal_lm_matches_model(model, ref, tol, skip_ignored_labels, op=op)


def forward_counting_fused_layers(model, layers: int, op: str = "out_proj_residual", **inputs):
    """model(**inputs), checking that `layers` layers ran their CODA forward: each calls `op` once
    (out_proj_residual; Gemma 2's and 3's MLPs geglu_mlp): a layer that fell back to HF's forward
    would give the same result."""
    from coda.integrations import hf

    calls, fused = [], getattr(hf.ops, op)
    setattr(hf.ops, op, lambda *a, **k: calls.append(1) or fused(*a, **k))
    try:
        out = model(**inputs)
    finally:
        setattr(hf.ops, op, fused)
    assert len(calls) == layers
    return out


def assert_causal_lm_matches_model(model, ref, tol: float, skip_ignored_labels: bool | None = None,
                                   fused_layers: int = 2, op: str = "out_proj_residual") -> None:
    """The loss and gradients match, and `fused_layers` layers ran their CODA forward."""
    ids, labels = batch()
    if skip_ignored_labels:
        labels[:, : SEQ // 2] = -100
    out = forward_counting_fused_layers(model, fused_layers, op, input_ids=ids, labels=labels)
    assert out.logits is None  # the logits are never written
    expected = reference_loss(ref, ids, labels)
    torch.testing.assert_close(out.loss, expected, rtol=tol, atol=tol)
    out.loss.backward()
    expected.backward()
    for (name, p), (_, q) in zip(model.named_parameters(), ref.named_parameters(), strict=True):
        err = ((p.grad - q.grad).norm() / q.grad.norm()).item()
        assert err < tol, (name, err)


@pytest.mark.parametrize("dtype, tol, attention_bias", [
    (torch.float64, 1e-10, False),
    (torch.float64, 1e-10, True),
    # float32 (Triton interpreter; the bias path only in float64, to keep the run short): CODA
    # rounds once per fused GEMM + epilogue, eager HF once per op; the relative differences of the
    # loss and of the gradients measured ~5e-7 (a few float32 ulps through 2 layers).
    (torch.float32, 2e-5, False),
])
def test_llama_loss_and_gradients_match(dtype, tol, attention_bias):
    ref = tiny_llama(dtype, attention_bias=attention_bias)
    assert_causal_lm_matches(ref, tol)


def test_llama_with_swish_named_activation_matches():
    """hidden_act="swish" is HF's other name of SiLU: patched as "silu" is."""
    assert_causal_lm_matches(tiny_llama(torch.float64, hidden_act="swish"), 1e-10)


@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-10), (torch.float32, 2e-5)])
@pytest.mark.parametrize("family, overrides", [
    ("Mistral", dict(sliding_window=6)),                 # a window shorter than the sequence
    ("Qwen2", dict(tie_word_embeddings=True)),           # biased q/k/v, the head tied to the table
    ("Qwen3", dict(head_dim=32, attention_bias=True)),   # q and k normalized per head before RoPE
    ("Phi3", dict(pad_token_id=0)),                      # fused qkv_proj and gate_up_proj weights
    # GeGLU, norms scaling by 1 + weight, the embedding scaled by sqrt(hidden), the head tied
    ("Gemma", dict(head_dim=16)),
], ids=["mistral", "qwen2", "qwen3", "phi3", "gemma"])
def test_llama_like_models_match(family, overrides, dtype, tol):
    assert_causal_lm_matches(tiny_llama(dtype, family, **overrides), tol)


def test_gemma_embedding_is_patched_and_scaled():
    """Gemma's token embedding (HF's GemmaTextScaledWordEmbedding: rows times sqrt(hidden)) runs
    as coda.ops.embedding, scaled as HF's, untied (no labels) and tied to the head (labels)."""
    ref = tiny_gemma(torch.float64)
    model = coda.patch(copy.deepcopy(ref))
    table = model.model.embed_tokens
    assert table._coda_patched and float(table.embed_scale) == 64 ** 0.5
    ids = batch()[0]
    torch.testing.assert_close(table(ids), ref.model.embed_tokens(ids), rtol=0, atol=0)
    torch.testing.assert_close(model(input_ids=ids).logits, ref(input_ids=ids).logits,
                               rtol=1e-10, atol=1e-10)


def tiny_gemma2(dtype: torch.dtype, **overrides) -> torch.nn.Module:
    """Gemma 2: each sublayer's output normalized before its residual add, soft-capped attention
    scores and logits, every other layer's attention in a window (shorter than the sequence)."""
    return tiny_llama(dtype, "Gemma2", **(dict(head_dim=16, query_pre_attn_scalar=16, sliding_window=6,
                                               attn_logit_softcapping=5.0, final_logit_softcapping=3.0)
                                          | overrides))


def tiny_gemma3(dtype: torch.dtype, **overrides) -> torch.nn.Module:
    """Gemma 3 (text): Gemma 2's layers with q and k normalized per head, no caps, local and global
    RoPE."""
    return tiny_llama(dtype, "Gemma3", config_name="Gemma3TextConfig",
                      **(dict(head_dim=16, query_pre_attn_scalar=16, sliding_window=6) | overrides))


@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-10), (torch.float32, 2e-5)])
@pytest.mark.parametrize("build", [tiny_gemma2, tiny_gemma3], ids=["gemma2", "gemma3"])
def test_gemma2_and_gemma3_match(build, dtype, tol):
    """Gemma 2 and 3 keep HF's layer forwards; their RMSNorms (the layers' four, q's and k's, the
    final one) run as coda.nn.rms_norm, their MLPs as geglu_mlp (counted: one a layer), the head
    with its loss as linear_cross_entropy (Gemma 2's logits capped in it), the embedding scaled."""
    ref = build(dtype)
    assert_causal_lm_matches(ref, tol, op="geglu_mlp")
    model = coda.patch(copy.deepcopy(ref))
    norms = [m for m in model.modules() if type(m).__name__.endswith("RMSNorm")]
    per_layer = 4 if build is tiny_gemma2 else 6   # Gemma 3's q_norm and k_norm too
    assert len(norms) == 2 * per_layer + 1 and all(m._coda_patched for m in norms)
    assert model.model.embed_tokens._coda_patched


@pytest.mark.parametrize("build", [tiny_llama, tiny_gemma2], ids=["llama", "gemma2"])
def test_a_bias_given_to_an_mlp_projection_after_patching_is_not_left_out(build):
    """The gated MLPs read only their projections' weights (they have no biases): one attached
    after coda.patch sends the layer (LLaMA) or the MLP (Gemma 2) back to HF's forward."""
    ref = build(torch.float64)
    model = coda.patch(copy.deepcopy(ref))
    for m in (ref, model):
        m.model.layers[0].mlp.down_proj.bias = torch.nn.Parameter(torch.ones(64, dtype=torch.float64))
    ids = batch()[0]
    torch.testing.assert_close(model(input_ids=ids).logits, ref(input_ids=ids).logits,
                               rtol=1e-10, atol=1e-10)


def test_gemma2_without_labels_and_generation_match():
    """Without labels (HF's head and its cap) and greedy decoding through the KV cache."""
    ref = tiny_gemma2(torch.float64)
    model = coda.patch(copy.deepcopy(ref))
    ids = batch()[0]
    torch.testing.assert_close(model(input_ids=ids).logits, ref(input_ids=ids).logits,
                               rtol=1e-10, atol=1e-10)
    options = dict(max_new_tokens=5, do_sample=False, use_cache=True, pad_token_id=0,
                   attention_mask=torch.ones_like(ids[:, :5]))
    assert torch.equal(model.generate(ids[:, :5], **options), ref.generate(ids[:, :5], **options))


@pytest.mark.parametrize("family", ["Llama", "Gemma"])
def test_gated_mlp_activation_follows_config(family):
    """hidden_act picks the gated MLP's op: tanh-GELU gives geglu_mlp (Gemma's default; a LLaMA
    built with it too), SiLU swiglu_mlp; an activation with no gated op (GELU by erf for LLaMA:
    Gemma's config reads "gelu" as tanh-GELU; ReLU) is refused."""
    for act in ("gelu_pytorch_tanh", "silu"):
        assert_causal_lm_matches(tiny_llama(torch.float64, family, head_dim=16, hidden_act=act), 1e-10)
    refused = "gelu" if family == "Llama" else "relu"
    with pytest.raises(coda.CodaError, match=f"MLP activation '{refused}'"):
        coda.patch(tiny_llama(torch.float64, family, head_dim=16, hidden_act=refused))


@pytest.mark.parametrize("family", ["Llama", "Gemma", "Phi3"])
def test_gated_mlp_follows_the_activation_module_not_the_config(family):
    """The op follows the activation module the MLP calls (`act_fn`; Phi-3's `activation_fn`):
    one replaced after the model was built is computed as it is, or refused, never as the
    config's hidden_act names it."""
    ref = tiny_llama(torch.float64, family, head_dim=16, pad_token_id=0)
    attribute = "activation_fn" if family == "Phi3" else "act_fn"
    silu = ref.config.hidden_act != "silu"   # the other gated op than the config's
    for layer in ref.model.layers:
        setattr(layer.mlp, attribute, torch.nn.SiLU() if silu else
                transformers.activations.ACT2FN["gelu_pytorch_tanh"])
    assert_causal_lm_matches(ref, 1e-10)
    for layer in ref.model.layers:
        setattr(layer.mlp, attribute, torch.nn.GELU())   # erf: no gated op
    with pytest.raises(coda.CodaError, match="MLP activation 'GELU'"):
        coda.patch(ref)


@pytest.mark.parametrize("option, value", [("partial_rotary_factor", 0.75), ("resid_pdrop", 0.1)])
def test_unsupported_phi3_config_raises(option, value):
    with pytest.raises(coda.CodaError, match=option):
        coda.patch(tiny_llama(torch.float64, "Phi3", pad_token_id=0, **{option: value}))


def test_phi3_residual_dropouts_given_a_p_run_hfs_layer():
    """Phi-3's dropouts on the attention's and the MLP's outputs, which the fused ops do not
    apply: a p set on the modules before patching is refused (the check read the config alone),
    and one set after runs HF's layer in training mode (it was dropped silently: every training
    loss the eval loss, an audit's find); with the same seed the loss is HF's."""
    ref = tiny_llama(torch.float64, "Phi3", pad_token_id=0)
    model = coda.patch(copy.deepcopy(ref))
    before = copy.deepcopy(ref)
    for net in (ref, model, before):
        for layer in net.model.layers:
            layer.resid_attn_dropout.p = layer.resid_mlp_dropout.p = 0.5
    with pytest.raises(coda.CodaError, match=r"resid_pdrop = 0\.5"):
        coda.patch(before)
    ids, labels = batch()
    ref.train(), model.train()
    for seed in (0, 1):
        torch.manual_seed(seed)
        want = reference_loss(ref, ids, labels)
        torch.manual_seed(seed)
        torch.testing.assert_close(model(input_ids=ids, labels=labels).loss, want, rtol=1e-10, atol=1e-10)


def test_embedding_options_set_after_patching_run_hfs_lookup():
    """max_norm, scale_grad_by_freq and sparse, which `coda.ops.embedding` does not apply, set on
    the token embedding after `coda.patch`: HF's lookup runs (they were ignored: the loss, the
    table and its gradient as without them, silently; an audit's find)."""
    ref = tiny_llama(torch.float64)
    ids, labels = batch()
    for option, value in (("max_norm", 0.05), ("scale_grad_by_freq", True), ("sparse", True)):
        want_model, model = copy.deepcopy(ref), coda.patch(copy.deepcopy(ref))
        for net in (want_model, model):
            setattr(net.get_input_embeddings(), option, value)
        got, want = model(input_ids=ids, labels=labels).loss, reference_loss(want_model, ids, labels)
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10, msg=option)
        got.backward(), want.backward()
        tables = [net.get_input_embeddings().weight for net in (model, want_model)]
        assert tables[0].grad.is_sparse == tables[1].grad.is_sparse == (option == "sparse")
        torch.testing.assert_close(tables[0].grad.to_dense(), tables[1].grad.to_dense(), rtol=1e-10,
                                   atol=1e-10, msg=option)
        torch.testing.assert_close(tables[0], tables[1], rtol=0, atol=0, msg=option)   # max_norm's renorm


def test_partial_rotary_factor_in_rope_parameters_is_refused():
    """transformers 5 may give the factor only inside `rope_parameters`, with no attribute of its
    own: refused all the same (patched, the rotation had covered whole heads: wrong logits)."""
    rope = {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5}
    model = tiny_llama(torch.float64, "Phi3", pad_token_id=0, rope_parameters=rope)
    assert getattr(model.config, "partial_rotary_factor", None) in (None, 1.0)
    with pytest.raises(coda.CodaError, match=r"partial_rotary_factor = 0\.5"):
        coda.patch(model)


def test_llama_without_labels_and_base_model_match():
    ref = tiny_llama(torch.float64)
    model = coda.patch(copy.deepcopy(ref))
    ids, _ = batch()
    torch.testing.assert_close(model(input_ids=ids).logits, ref(input_ids=ids).logits,
                               rtol=1e-10, atol=1e-10)
    base = coda.patch(copy.deepcopy(ref.model))  # LlamaModel alone
    torch.testing.assert_close(base(input_ids=ids).last_hidden_state,
                               ref.model(input_ids=ids).last_hidden_state, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("build", ["llama", "gpt2", "bert"])
def test_return_dict_false_gives_a_tuple(build):
    """With labels and `return_dict=False` (the argument or the config's), the patched LM heads
    give a tuple, as HF's do: `to_tuple()` of their output, the loss first."""
    ref = {"llama": tiny_llama, "gpt2": tiny_gpt2, "bert": tiny_bert}[build](torch.float64)
    model = coda.patch(copy.deepcopy(ref))
    ids, labels = batch()
    expected = model(input_ids=ids, labels=labels).loss
    got = model(input_ids=ids, labels=labels, return_dict=False)
    want = ref(input_ids=ids, labels=labels, return_dict=False)
    assert isinstance(got, tuple) and len(got) == len(want)   # logits None in their place
    assert got[1] is None and [type(t) for t in got[2:]] == [type(t) for t in want[2:]]
    torch.testing.assert_close(got[0], expected, rtol=0, atol=0)
    model.config.return_dict = False
    assert isinstance(model(input_ids=ids, labels=labels), tuple)


@pytest.mark.parametrize("build", ["llama", "gpt2"])
def test_inference_mode(build):
    """Under torch.inference_mode (HF pipelines, evaluation loops) the blocks' outputs are
    inference tensors, which have no version counter: their row sums are not carried, and the
    logits and the loss are the unpatched model's."""
    ref = tiny_llama(torch.float64) if build == "llama" else tiny_gpt2(torch.float64)
    model = coda.patch(copy.deepcopy(ref))
    ids, labels = batch()
    with torch.inference_mode():
        torch.testing.assert_close(model(input_ids=ids).logits, ref(input_ids=ids).logits,
                                   rtol=1e-10, atol=1e-10)
        torch.testing.assert_close(model(input_ids=ids, labels=labels).loss, reference_loss(ref, ids, labels),
                                   rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("build", ["llama", "gpt2", "bert"])
def test_output_attentions_gives_hfs_maps(build):
    """HF records attention maps with hooks on its attention modules, which the patched layers
    do not call: while it records them the layers run HF's forward, so the maps are HF's, not
    an empty tuple."""
    ref = {"llama": tiny_llama, "gpt2": tiny_gpt2, "bert": tiny_bert}[build](torch.float64)
    model = coda.patch(copy.deepcopy(ref))
    ids, _ = batch()
    got, want = (m(input_ids=ids, output_attentions=True).attentions for m in (model, ref))
    assert len(got) == len(want) == 2
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


def test_num_items_in_batch_is_a_sum_over_given_count():
    ref = tiny_llama(torch.float64)
    model = coda.patch(copy.deepcopy(ref))
    ids, labels = batch()
    loss = model(input_ids=ids, labels=labels, num_items_in_batch=torch.tensor(50)).loss
    expected = ref(input_ids=ids, labels=labels, num_items_in_batch=torch.tensor(50)).loss
    torch.testing.assert_close(loss, expected.to(loss.dtype), rtol=1e-6, atol=0)  # HF: float32


def test_state_dict_is_unchanged_and_loads_both_ways():
    ref = tiny_llama(torch.float64)
    before = ref.state_dict()
    model = coda.patch(copy.deepcopy(ref))
    after = model.state_dict()
    assert list(before) == list(after)
    for key in before:
        assert torch.equal(before[key], after[key]), key
    assert coda.patch(model) is model  # idempotent
    fresh = tiny_llama(torch.float64)
    fresh.load_state_dict(after)
    model.load_state_dict(before)


@pytest.mark.parametrize("tail", [(5,), ()])   # a weight's rows, a bias
def test_stacked_qkv_rows_and_their_gradients(tail):
    """The q/k/v stack's row gathers, both ways, against permute_for_interleaved_rope's views
    and torch.cat, differentiated by autograd (float64, fresh random parts)."""
    from coda.integrations.hf import StackedRows

    d, sizes = 8, (4 * 8, 2 * 8, 2 * 8)
    parts = [torch.randn(n, *tail, dtype=torch.float64, requires_grad=True) for n in sizes]
    heads = [n // d for n in sizes]
    expected = torch.cat([coda.ops.permute_for_interleaved_rope(parts[0], heads[0], d),
                          coda.ops.permute_for_interleaved_rope(parts[1], heads[1], d), parts[2]])
    grad = torch.randn_like(expected)
    want = torch.autograd.grad(expected, parts, grad)
    stacked = StackedRows.apply(2, d, *parts)
    assert torch.equal(stacked, expected)
    for got, ref in zip(torch.autograd.grad(stacked, parts, grad), want, strict=True):
        assert got.is_contiguous() and torch.equal(got, ref)


@pytest.mark.parametrize("option, value", [("hidden_act", "gelu"), ("mlp_bias", True)])
def test_unsupported_llama_config_raises(option, value):
    model = tiny_llama(torch.float64, **{option: value})
    with pytest.raises(coda.CodaError, match=option):
        coda.patch(model)


def test_unsupported_model_raises():
    with pytest.raises(coda.CodaError, match="no supported HuggingFace module"):
        coda.patch(torch.nn.Linear(4, 4))
    with pytest.raises(coda.CodaError, match=r"takes a torch\.nn\.Module .* got str"):
        coda.patch("gpt2")


# ---------------------------------------------------------------------------------------------- GPT-2

def tiny_gpt2(dtype: torch.dtype, **overrides) -> torch.nn.Module:
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        vocab_size=VOCAB, n_embd=64, n_inner=96, n_layer=2, n_head=4, n_positions=64, bos_token_id=0,
        eos_token_id=0,
        attn_implementation="eager", **overrides)
    model = transformers.GPT2LMHeadModel(config).to(dtype).eval()
    with torch.no_grad():  # HF initializes biases to 0 and norm gains to 1: make them non-trivial
        for name, p in model.named_parameters():
            if name.endswith(("bias", "ln_1.weight", "ln_2.weight", "ln_f.weight")):
                p.add_(0.3 * torch.randn_like(p))
    return model


@pytest.mark.parametrize("dtype, tol, overrides", [
    (torch.float64, 1e-10, {}),
    (torch.float64, 1e-10, {"scale_attn_by_inverse_layer_idx": True,
                            "activation_function": "gelu_pytorch_tanh"}),
    (torch.float32, 2e-5, {}),  # Triton interpreter: a few float32 ulps through 2 layers, as above
])
def test_gpt2_loss_and_gradients_match(dtype, tol, overrides):
    ref = tiny_gpt2(dtype, **overrides)
    assert_causal_lm_matches(ref, tol)


@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-10), (torch.float32, 2e-5)])
def test_causal_lm_skipping_ignored_labels_matches(dtype, tol):
    assert_causal_lm_matches(tiny_gpt2(dtype), tol, skip_ignored_labels=True)
    assert_causal_lm_matches(tiny_llama(dtype), tol, skip_ignored_labels=True)


def test_skip_ignored_labels_defaults_and_errors():
    gpt2, bert = coda.patch(tiny_gpt2(torch.float32)), coda.patch(tiny_bert(torch.float32))
    assert not gpt2._coda_skip_ignored and bert._coda_skip_ignored   # masked LMs skip by default
    assert coda.patch(gpt2, skip_ignored_labels=True)._coda_skip_ignored   # a second patch sets it
    with pytest.raises(coda.CodaError, match="skip_ignored_labels must be None or a bool"):
        coda.patch(gpt2, skip_ignored_labels=1)


def test_gpt2_without_labels_and_base_model_match():
    ref = tiny_gpt2(torch.float64)
    model = coda.patch(copy.deepcopy(ref))
    ids, _ = batch()
    mask = torch.ones_like(ids)
    mask[1, :3] = 0  # left padding: HF's mask reaches the attention unchanged
    torch.testing.assert_close(model(input_ids=ids, attention_mask=mask).logits,
                               ref(input_ids=ids, attention_mask=mask).logits, rtol=1e-10, atol=1e-10)
    base = coda.patch(copy.deepcopy(ref.transformer))  # GPT2Model alone
    torch.testing.assert_close(base(input_ids=ids).last_hidden_state,
                               ref.transformer(input_ids=ids).last_hidden_state, rtol=1e-10, atol=1e-10)


def _counting_maps(monkeypatch, *programs) -> dict[str, int]:
    """Calls of each program's `map`, by program name, while the test runs."""
    counts = {}
    for prog in programs:
        def counted(*args, _prog=prog, _map=prog.map, **kwargs):
            counts[_prog.name] = counts.get(_prog.name, 0) + 1
            return _map(*args, **kwargs)
        monkeypatch.setattr(prog, "map", counted)
    return counts


@pytest.mark.parametrize("build", ["gpt2", "llama"])
def test_blocks_hand_their_row_sums_to_the_next_norm(monkeypatch, build):
    """Each block's last GEMM sums its output's rows for the next block's norm and for the
    model's final norm (GPT-2's ln_f, LLaMA's norm, both CODA's: a normalizing map on the sums,
    after GPT-2's two ln_2): only the first block's norm runs a statistics map, and the results
    still match."""
    from coda.nn.layer_norm import LAYER_NORM, RMS_NORM
    from coda.ops import norms
    counts = _counting_maps(monkeypatch, norms.LN_STATS, norms.RMS_STATS, LAYER_NORM, RMS_NORM)
    ref = tiny_gpt2(torch.float64) if build == "gpt2" else tiny_llama(torch.float64)
    assert_causal_lm_matches(ref, 1e-10)
    assert counts == ({"ln_stats": 1, "layer_norm": 3} if build == "gpt2"
                      else {"rms_stats": 1, "rms_norm": 1})


def test_gpt2_norms_hand_their_dx_column_sums_back(monkeypatch):
    """Triton backend (the interpreter, float32): each LayerNorm's one-pass backward sums the
    columns of the dx it writes, and the op before it on the residual stream (the MLP's fc2
    after ln_1 of the next block or ln_f, the out projection after ln_2) takes them as its bias
    gradient: four in two blocks, and every gradient still matches."""
    import importlib

    from coda.ops import common, norms
    taken = []   # whether each op that asked found sums

    def recording(t, dtype, _known=common.known_column_sums):
        found = _known(t, dtype)
        taken.append(found is not None)
        return found

    for module in (importlib.import_module("coda.ops.linear"), norms):   # coda.ops.linear: a function
        monkeypatch.setattr(module, "known_column_sums", recording)
    assert_causal_lm_matches(tiny_gpt2(torch.float32), 2e-5)
    assert taken == [True] * 4


@pytest.mark.parametrize("how", ["in_place", "data", "pre_hook_data"])
@pytest.mark.parametrize("build", ["gpt2", "llama"])
def test_a_block_output_changed_in_place_drops_its_row_sums(build, how):
    """A hook that scales the first block's output in place: the next norm must sum the new
    values itself (stale sums would normalise with the old statistics). Through `.data`, which
    no version counter sees, a forward hook on the first block, or a pre-hook on the second,
    turns the carrying off (it went unseen: the loss 1.5% off, an audit's find)."""
    ref = tiny_gpt2(torch.float64) if build == "gpt2" else tiny_llama(torch.float64)
    model = coda.patch(copy.deepcopy(ref))

    def scale(tensor):
        (tensor.data if how != "in_place" else tensor).mul_(1.5)

    for net in (ref, model):
        blocks = net.transformer.h if build == "gpt2" else net.model.layers
        assert len(blocks) > 1
        if how == "pre_hook_data":
            blocks[1].register_forward_pre_hook(lambda module, args: scale(args[0]))
        else:
            blocks[0].register_forward_hook(lambda module, args, out: scale(out[0] if isinstance(out, tuple)
                                                                             else out))
    ids, labels = batch()
    with torch.no_grad():   # autograd forbids changing a custom Function's output view in place
        torch.testing.assert_close(model(input_ids=ids, labels=labels).loss,
                                   reference_loss(ref, ids, labels), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("where", ["ln_f.bias", "h.0.ln_2.weight", "h.1.ln_1.bias"])
def test_a_norm_parameter_set_to_none_after_patching_runs_hfs_forward(where):
    """A LayerNorm's weight or bias set to None after `coda.patch` (the layers watched their
    submodules' biases only, `ln_f` nothing): HF's forward, where it was a LaunchError."""
    ref = tiny_gpt2(torch.float64)
    model = coda.patch(copy.deepcopy(ref))
    path, name = where.rsplit(".", 1)
    for net in (ref, model):
        setattr(net.transformer.get_submodule(path), name, None)
    ids, labels = batch()
    torch.testing.assert_close(model(input_ids=ids, labels=labels).loss, reference_loss(ref, ids, labels),
                               rtol=1e-10, atol=1e-10)


def test_gpt2_state_dict_is_unchanged():
    ref = tiny_gpt2(torch.float64)
    before = ref.state_dict()
    after = coda.patch(copy.deepcopy(ref)).state_dict()
    assert list(before) == list(after)
    for key in before:
        assert torch.equal(before[key], after[key]), key


@pytest.mark.parametrize("option, value", [("activation_function", "relu"), ("add_cross_attention", True),
                                           ("reorder_and_upcast_attn", True)])
def test_unsupported_gpt2_config_raises(option, value):
    """The refusal leaves the model as it was: the head and ln_f, met before the blocks, are not
    left patched either."""
    model = tiny_gpt2(torch.float64, **{option: value})
    classes = [type(m) for m in model.modules()]
    with pytest.raises(coda.CodaError, match=option):
        coda.patch(model)
    assert [type(m) for m in model.modules()] == classes
    assert not any("_coda_patched" in m.__dict__ for m in model.modules())


@pytest.mark.parametrize("config_after", [False, True], ids=["module-replaced", "config-edited"])
def test_gpt2_activation_follows_the_module(config_after):
    """The MLP's activation is the module it calls: one replaced before patching (ReLU for GELU),
    or a config edited after building (GELU named, ReLU built), was computed as the config named,
    silently (0.4 relative); both are refused now."""
    model = tiny_gpt2(torch.float64, **({"activation_function": "relu"} if config_after else {}))
    if config_after:
        model.config.activation_function = "gelu_new"
    else:
        for block in model.transformer.h:
            block.mlp.act = torch.nn.ReLU()
    with pytest.raises(coda.CodaError, match=r"activation_function = 'relu' is not supported"):
        coda.patch(model)


# ----------------------------------------------------------------------------------------------- BERT

def tiny_bert(dtype: torch.dtype, **overrides) -> torch.nn.Module:
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        max_position_embeddings=64, attn_implementation="eager", **overrides)
    model = transformers.BertForMaskedLM(config).to(dtype).eval()
    with torch.no_grad():  # non-trivial biases and norm parameters
        for name, p in model.named_parameters():
            if "LayerNorm" in name or name.endswith("bias"):
                p.add_(0.3 * torch.randn_like(p))
    return model


@pytest.mark.parametrize("dtype, tol, hidden_act", [
    (torch.float64, 1e-10, "gelu"),
    (torch.float64, 1e-10, "gelu_new"),
    (torch.float32, 2e-5, "gelu"),  # Triton interpreter: a few float32 ulps, as above
])
def test_bert_mlm_loss_and_gradients_match(dtype, tol, hidden_act):
    ref = tiny_bert(dtype, hidden_act=hidden_act)
    model = coda.patch(copy.deepcopy(ref))
    ids, labels = batch()
    mask = torch.ones_like(ids)
    mask[1, -3:] = 0  # padding
    with torch.no_grad():   # without labels: HF's decoder on the patched transform
        torch.testing.assert_close(model(input_ids=ids, attention_mask=mask).logits,
                                   ref(input_ids=ids, attention_mask=mask).logits, rtol=tol, atol=tol)
    out = model(input_ids=ids, attention_mask=mask, labels=labels)
    expected = ref(input_ids=ids, attention_mask=mask, labels=labels)
    assert out.logits is None   # with labels the decoder and loss are linear_cross_entropy's
    assert model.cls.predictions.transform._coda_patched
    assert model.bert.encoder.layer[0].attention.self._coda_patched   # q, k, v in one GEMM
    torch.testing.assert_close(out.loss, expected.loss, rtol=tol, atol=tol)
    out.loss.backward()
    expected.loss.backward()
    for (name, p), (_, q) in zip(model.named_parameters(), ref.named_parameters(), strict=True):
        if q.grad is None:  # the pooler is unused by the MLM loss
            assert p.grad is None, name
            continue
        # The key bias shifts each query's scores by a constant, which softmax ignores: its exact
        # gradient is 0 and both sides hold rounding noise, so it is compared absolutely.
        scale = 1.0 if name.endswith("key.bias") else q.grad.norm()
        err = ((p.grad - q.grad).norm() / scale).item()
        assert err < tol, (name, err)


@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-10), (torch.float32, 2e-5)])
@pytest.mark.parametrize("family", ["Roberta", "XLMRoberta", "Camembert", "Electra"])
def test_bert_like_encoders_match(family, dtype, tol):
    """The encoders built as BERT is, module for module, take its patchers: a sequence
    classifier's loss and every gradient (its head is HF's) match the unpatched model's."""
    torch.manual_seed(0)
    config = getattr(transformers, f"{family}Config")(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        max_position_embeddings=64, attn_implementation="eager", pad_token_id=1)
    ref = getattr(transformers, f"{family}ForSequenceClassification")(config).to(dtype).eval()
    with torch.no_grad():   # non-trivial biases and norm parameters
        for name, p in ref.named_parameters():
            if "LayerNorm" in name or name.endswith("bias"):
                p.add_(0.3 * torch.randn_like(p))
    model = coda.patch(copy.deepcopy(ref))
    assert sum(getattr(m, "_coda_patched", False) for m in model.modules()) == 2 * 3 + 1   # + embedding
    ids, labels = batch()[0].clamp(min=2), torch.tensor([0, 1])
    out = forward_counting_fused_layers(model, 2, input_ids=ids, labels=labels)
    expected = ref(input_ids=ids, labels=labels)
    torch.testing.assert_close(out.loss, expected.loss, rtol=tol, atol=tol)
    out.loss.backward()
    expected.loss.backward()
    for (name, p), (_, q) in zip(model.named_parameters(), ref.named_parameters(), strict=True):
        if q.grad is not None:   # the key bias's exact gradient is 0 (test_bert_mlm_...)
            scale = 1.0 if name.endswith("key.bias") else q.grad.norm()
            assert ((p.grad - q.grad).norm() / scale).item() < tol, name


def test_bert_base_model_and_state_dict():
    ref = tiny_bert(torch.float64)
    before = ref.state_dict()
    model = coda.patch(copy.deepcopy(ref))
    ids, _ = batch()
    torch.testing.assert_close(model.bert(input_ids=ids).last_hidden_state,
                               ref.bert(input_ids=ids).last_hidden_state, rtol=1e-10, atol=1e-10)
    base = coda.patch(transformers.BertModel(ref.config))  # BertModel alone is supported too
    assert base.encoder.layer[0]._coda_patched   # its feed-forward: one mlp
    after = model.state_dict()
    assert list(before) == list(after)
    for key in before:
        assert torch.equal(before[key], after[key]), key


def test_bert_chunked_feed_forward():
    """config.chunk_size_feed_forward: HF calls the patched feed-forward once per chunk of the
    sequence; outputs and gradients are the unpatched model's."""
    ref = tiny_bert(torch.float64, chunk_size_feed_forward=4)
    model = coda.patch(copy.deepcopy(ref))
    ids, labels = batch()
    out, expected = model(input_ids=ids, labels=labels), ref(input_ids=ids, labels=labels)
    torch.testing.assert_close(out.loss, expected.loss, rtol=1e-10, atol=1e-10)
    out.loss.backward()
    expected.loss.backward()
    for (name, p), (_, q) in zip(model.named_parameters(), ref.named_parameters(), strict=True):
        if q.grad is not None and not name.endswith("key.bias"):   # key.bias: see above
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-8, atol=1e-10, msg=name)


def tiny_bert_decoder(dtype: torch.dtype) -> torch.nn.Module:
    """BERT as a causal LM (is_decoder): its self-attention runs through the KV cache."""
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        max_position_embeddings=64, attn_implementation="eager", is_decoder=True)
    return transformers.BertLMHeadModel(config).to(dtype).eval()


def test_bert_self_attention_takes_an_encoder_decoder_caches_self_part():
    """Inside an encoder-decoder model the cache is an EncoderDecoderCache: the patched
    self-attention updates its self-attention part, as HF's does."""
    ref = tiny_bert_decoder(torch.float64).bert.encoder.layer[0].attention.self
    model = coda.patch(copy.deepcopy(ref))
    x = torch.randn(BATCH, 3, 64, dtype=torch.float64)
    caches = [transformers.EncoderDecoderCache(transformers.DynamicCache(), transformers.DynamicCache())
              for _ in range(2)]
    # `past_key_values`: the name transformers 5.17 takes, and 5.24 still maps to `cache`
    got, want = model(x, past_key_values=caches[0])[0], ref(x, past_key_values=caches[1])[0]
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)
    assert [c.self_attention_cache.get_seq_length() for c in caches] == [3, 3]


def test_unsupported_bert_config_raises():
    with pytest.raises(coda.CodaError, match="hidden_act = 'silu' is not supported"):
        coda.patch(tiny_bert(torch.float64, hidden_act="silu"))


@pytest.mark.parametrize("use_reentrant", [True, False])
@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_gradient_checkpointing(family, use_reentrant):
    """With HF's gradient checkpointing each layer's forward runs again in the backward (its input
    then carries no row sums under the reentrant form): the loss and gradients still match."""
    ref = (tiny_llama if family == "llama" else tiny_gpt2)(
        torch.float64, **({} if family == "llama" else dict(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)))
    ref.train().gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": use_reentrant})
    assert_causal_lm_matches(ref, 1e-10)


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_reentrant_checkpointing_recomputes_the_same_layer(family, monkeypatch):
    """Under bf16 autocast (reference backend) the reentrant checkpoint's recomputed layers get
    the row sums the first forward gave them (their input, detached, shares the previous
    layer's output's storage), so the gradients equal the uncheckpointed ones bit for bit;
    summing them again made each norm round differently, the gradients off by ~5e-3."""
    monkeypatch.setattr(coda.runtime.program, "interpreter_enabled", lambda: False)
    ref = (tiny_llama(torch.float32) if family == "llama" else
           tiny_gpt2(torch.float32, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))
    ids, labels = batch()

    def grads(checkpointed: bool) -> list[torch.Tensor]:
        model = copy.deepcopy(ref).train()
        if checkpointed:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = coda.patch(model)(input_ids=ids, labels=labels).loss
        loss.backward()
        return [p.grad for p in model.parameters()]

    for got, want in zip(grads(True), grads(False), strict=True):
        assert torch.equal(got, want)


@pytest.mark.parametrize("use_reentrant", [True, False])
def test_checkpointed_dropout_replays_the_forwards_masks(use_reentrant):
    """GPT-2 with hidden dropout in training: the recomputed layers draw the seeds the first
    forward drew (the checkpoint restores torch's RNG), so the gradients are the uncheckpointed
    model's, not those of other masks."""
    ref = tiny_gpt2(torch.float64, resid_pdrop=0.3, embd_pdrop=0.0, attn_pdrop=0.0).train()
    ids, labels = batch()

    def grads(checkpointed: bool) -> list[torch.Tensor]:
        model = copy.deepcopy(ref)
        if checkpointed:
            model.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": use_reentrant})
        torch.manual_seed(5)
        coda.patch(model)(input_ids=ids, labels=labels).loss.backward()
        return [p.grad for p in model.parameters()]

    for got, want in zip(grads(True), grads(False), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("build", [tiny_llama, tiny_gpt2, tiny_bert], ids=["llama", "gpt2", "bert"])
def test_autocast(build, dtype, monkeypatch):
    """A float32 model trained under torch.autocast (HF's Trainer with bf16=True or fp16=True):
    the patched model runs, its parameters get float32 gradients, and its loss and gradients are
    within twice eager autocast's error against the model in float64. float16 runs the real
    kernels (the interpreter on a CPU); bfloat16, which the interpreter gets wrong, the
    reference backend (tests/gpu/test_hf_gpu.py runs it through the kernels on a GPU)."""
    if dtype == torch.bfloat16:
        monkeypatch.setattr(coda.runtime.program, "interpreter_enabled", lambda: False)
    # HF's own RMSNorm (through float32, as a model trained so has it): the float64 model's
    # error stays far below the 16-bit runs'
    ref = build(torch.float32, exact_norms=False) if build is tiny_llama else build(torch.float32)
    ids, labels = batch()
    if build is tiny_bert:
        labels[:, ::2] = -100

    def loss_and_grads(model, autocast: bool):
        model.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=dtype, enabled=autocast):
            loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
        assert all(p.grad.dtype == p.dtype for p in model.parameters() if p.grad is not None)
        return loss.double(), {n: p.grad.double() for n, p in model.named_parameters() if p.grad is not None}

    exact = loss_and_grads(copy.deepcopy(ref).double(), False)
    eager = loss_and_grads(copy.deepcopy(ref), True)
    fused = loss_and_grads(coda.patch(copy.deepcopy(ref)), True)
    floor = torch.finfo(dtype).eps / 4   # a quarter of the dtype's resolution, relative

    def rel(x, y):
        return ((x - y).norm() / y.norm()).item()
    assert rel(fused[0], exact[0]) <= 2 * rel(eager[0], exact[0]) + floor
    assert fused[1].keys() == eager[1].keys()
    for name, want in exact[1].items():
        if want.norm() > 1e-3 * max(g.norm() for g in exact[1].values()):   # not a gradient of ~0
            assert rel(fused[1][name], want) <= 2 * rel(eager[1][name], want) + floor, name


class Adapter(torch.nn.Module):
    """A LoRA-like wrapper, as PEFT injects one: base(x) + B(A(x)), with the base's `.weight`
    in view (what a forward that reads weights directly would silently use alone)."""

    def __init__(self, base: torch.nn.Linear):
        super().__init__()
        self.base = base
        self.a = torch.nn.Linear(base.in_features, 4, bias=False, dtype=base.weight.dtype)
        self.b = torch.nn.Linear(4, base.out_features, bias=False, dtype=base.weight.dtype)
        torch.nn.init.normal_(self.b.weight, std=0.1)

    @property
    def weight(self) -> torch.Tensor:
        return self.base.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + self.b(self.a(x))


def with_adapters(model: torch.nn.Module) -> torch.nn.Module:
    for layer in model.model.layers:
        layer.self_attn.q_proj = Adapter(layer.self_attn.q_proj)
    return model


@pytest.mark.parametrize("adapters_first", [True, False],
                         ids=["adapted-then-patched", "patched-then-adapted"])
def test_a_layer_holding_modules_it_would_not_call_keeps_hfs_forward(adapters_first):
    """Adapters injected before coda.patch: the layer is left to HF's forward (with a warning);
    after it: the patched forward hands the call to HF's. Either way the result is the adapted
    model's, never the base weights' alone."""
    ref = with_adapters(tiny_llama(torch.float64))
    model = copy.deepcopy(ref)
    if adapters_first:
        with pytest.warns(UserWarning, match=r"LlamaDecoderLayer holds .*Adapter.*keeps HF's forward"):
            coda.patch(model)
    else:
        base = tiny_llama(torch.float64)
        model = with_adapters(coda.patch(base))
        model.load_state_dict(ref.state_dict())
    assert_causal_lm_matches_model(model, ref, 1e-10, fused_layers=0)


def _identity_o_proj(model):
    model.model.layers[0].self_attn.o_proj = torch.nn.Identity()   # an ablation


def _bitnet_q_proj(model):   # transformers' own nn.Linear subclass, which quantizes in its forward
    from transformers.integrations.bitnet import AutoBitLinear
    for layer in model.model.layers:
        linear = layer.self_attn.q_proj
        layer.self_attn.q_proj = AutoBitLinear(linear.in_features, linear.out_features, bias=False,
                                               online_quant=True, dtype=linear.weight.dtype)
        layer.self_attn.q_proj.load_state_dict(linear.state_dict())


@pytest.mark.parametrize("change, fused", [(_identity_o_proj, 1), (_bitnet_q_proj, 0)],
                         ids=["identity", "bitnet"])
def test_modules_from_torch_or_transformers_that_compute_otherwise_keep_hfs_forward(change, fused):
    """Any module of torch or transformers passed as native: BitNet's quantizing linear (from
    transformers.integrations) was read as a plain weight (logits 0.6 off, silently), an
    nn.Identity where a projection was crashed the forward. Now their layers keep HF's forward,
    with a warning, and the model computes as the unpatched one."""
    ref = tiny_llama(torch.float64)
    change(ref)
    model = copy.deepcopy(ref)
    with pytest.warns(UserWarning, match=r"LlamaDecoderLayer holds .*(Identity|AutoBitLinear).*keeps HF's"):
        coda.patch(model)
    assert_causal_lm_matches_model(model, ref, 1e-10, fused_layers=fused)


def test_a_parametrized_projection_stays_patched():
    """A weight-normed projection (torch.nn.utils.parametrizations) reads its weight as computed:
    its layer keeps CODA's forward and matches."""
    ref = tiny_llama(torch.float64)
    for layer in ref.model.layers:
        torch.nn.utils.parametrizations.weight_norm(layer.self_attn.q_proj)
    model = coda.patch(copy.deepcopy(ref))
    assert_causal_lm_matches_model(model, ref, 1e-10, fused_layers=2)


def test_logits_to_keep_with_labels_is_hfs_loss_over_the_kept_positions():
    """HF's loss over the last k positions (labels of those) was the loss over every position, or
    a shape error; labels of every position with k kept are refused (HF: a ValueError)."""
    ref = tiny_llama(torch.float64)
    model = coda.patch(copy.deepcopy(ref))
    ids = batch()[0]
    for keep in (4, torch.tensor([1, 5, 9])):
        labels = ids[:, -keep:] if isinstance(keep, int) else ids[:, keep]
        torch.testing.assert_close(model(input_ids=ids, labels=labels, logits_to_keep=keep).loss.float(),
                                   ref(input_ids=ids, labels=labels, logits_to_keep=keep).loss,
                                   rtol=1e-6, atol=1e-6)   # HF's loss is float32
    with pytest.raises(coda.CodaError, match="target must be an integer tensor of shape"):
        model(input_ids=ids, labels=ids, logits_to_keep=4)


def test_a_replica_runs_its_own_patched_forward():
    """nn.DataParallel's replicas copy a module's __dict__, not its class: a patched forward kept
    as a bound method there would run on the original module (its parameters, its device). Here
    each patched module is an instance of a subclass that defines the forward, so a replica made
    as DataParallel makes one computes with its own parameters."""
    ref = tiny_gpt2(torch.float64)
    model = coda.patch(copy.deepcopy(ref))
    assert type(model.transformer.h[0]).__name__ == "GPT2Block"   # the same name, a subclass
    assert isinstance(model.transformer.h[0], type(ref.transformer.h[0]))
    for module in (model.transformer.wte, model.transformer.ln_f, model.transformer.h[0]):
        replica = module._replicate_for_data_parallel()
        assert type(replica).forward is type(module).forward and "forward" not in vars(replica)
    table = model.transformer.wte._replicate_for_data_parallel()
    table._parameters = {"weight": model.transformer.wte.weight.detach() * 2}
    ids = batch()[0]
    torch.testing.assert_close(table(ids), 2 * model.transformer.wte(ids).detach())


def test_pickling_a_patched_model_gives_the_unpatched_one():
    """torch.save(model) of a patched model: its modules come back as their HF classes, unpatched
    (the patched subclasses live only in the process that made them), computing the same;
    coda.patch patches them again. Copies stay patched."""
    import io

    model = coda.patch(tiny_gpt2(torch.float64))
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    block = loaded.transformer.h[0]
    assert type(block) is transformers.models.gpt2.modeling_gpt2.GPT2Block
    assert not hasattr(block, "_coda_patched")
    ids = batch()[0]
    torch.testing.assert_close(loaded(input_ids=ids).logits, model(input_ids=ids).logits)
    assert coda.patch(loaded).transformer.h[0]._coda_patched
    for twin in (copy.copy(model.transformer.h[0]), copy.deepcopy(model).transformer.h[0]):
        assert type(twin) is type(model.transformer.h[0])


def tiny_mistral(dtype: torch.dtype) -> torch.nn.Module:
    return tiny_llama(dtype, "Mistral", sliding_window=6)


def tiny_qwen2(dtype: torch.dtype) -> torch.nn.Module:
    return tiny_llama(dtype, "Qwen2")


def tiny_qwen3(dtype: torch.dtype) -> torch.nn.Module:
    return tiny_llama(dtype, "Qwen3", head_dim=32)


def tiny_phi3(dtype: torch.dtype) -> torch.nn.Module:
    return tiny_llama(dtype, "Phi3", pad_token_id=0)


def tiny_gemma(dtype: torch.dtype) -> torch.nn.Module:
    return tiny_llama(dtype, "Gemma", head_dim=16)


@pytest.mark.parametrize("build", [tiny_llama, tiny_mistral, tiny_qwen2, tiny_phi3, tiny_gemma],
                         ids=["llama", "mistral", "qwen2", "phi3", "gemma"])
def test_the_kv_cache_holds_hfs_keys(build):
    """The patched layers rotate q and k in a per-head permuted order (qkv_rope's interleaved
    pairs); the keys they cache are in HF's order, so a step HF's layer forward runs on that
    cache (here output_attentions=True) or the unpatched model continuing it reads HF's keys."""
    ref = build(torch.float64)
    model = coda.patch(copy.deepcopy(ref))
    ids = batch()[0]
    prefix, last = ids[:, :-1], ids[:, -1:]
    with torch.no_grad():
        caches = [m(input_ids=prefix, use_cache=True).past_key_values for m in (model, ref)]
        for got_layer, want_layer in zip(caches[0].layers, caches[1].layers, strict=True):
            torch.testing.assert_close(got_layer.keys, want_layer.keys, rtol=1e-10, atol=1e-10)
        hf_step = model(input_ids=last, past_key_values=caches[0], output_attentions=True).logits[:, -1]
        want = ref(input_ids=last, past_key_values=caches[1]).logits[:, -1]
        cache = model(input_ids=prefix, use_cache=True).past_key_values
        unpatched_step = ref(input_ids=last, past_key_values=cache).logits[:, -1]
    torch.testing.assert_close(hf_step, want, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(unpatched_step, want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("build, norm", [(tiny_gemma3, "layers.0.post_attention_layernorm"),
                                         (tiny_gemma, "norm")], ids=["gemma3", "gemma-final"])
def test_gemma_norms_keep_the_input_dtype_under_autocast(build, norm):
    """HF's Gemma RMSNorms return their input's dtype (type_as), under autocast too, where
    coda.nn.rms_norm's output is float32: the patched norms (Gemma 2's and 3's, Gemma's final
    one) give the input's dtype, so a bf16 model's hidden states stay bf16."""
    model = coda.patch(build(torch.bfloat16, **({"exact_norms": False} if build is tiny_gemma3 else {})))
    x = torch.randn(2, 5, 64, dtype=torch.bfloat16)
    norm = model.model.get_submodule(norm)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert norm(x).dtype == torch.bfloat16 and norm(x.float()).dtype == torch.float32
        hidden = model.model(input_ids=batch()[0]).last_hidden_state
    assert hidden.dtype == torch.bfloat16


@pytest.mark.parametrize("build", [tiny_llama, tiny_mistral, tiny_qwen2, tiny_qwen3, tiny_phi3, tiny_gemma,
                                   tiny_gpt2, tiny_bert_decoder],
                         ids=["llama", "mistral", "qwen2", "qwen3", "phi3", "gemma", "gpt2", "bert"])
def test_generation_with_kv_cache_matches(build):
    """Greedy decoding through the KV cache (the patched layers' cache.update path): the same
    tokens and the same logits at every step as the unpatched model."""
    ref = build(torch.float64)
    model = coda.patch(copy.deepcopy(ref))
    prompt = batch()[0][:, :5]
    options = dict(max_new_tokens=6, do_sample=False, use_cache=True, pad_token_id=0,
                   attention_mask=torch.ones_like(prompt), output_logits=True,
                   return_dict_in_generate=True)
    got, want = model.generate(prompt, **options), ref.generate(prompt, **options)
    assert torch.equal(got.sequences, want.sequences)
    for step_got, step_want in zip(got.logits, want.logits, strict=True):
        torch.testing.assert_close(step_got, step_want, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("build", [tiny_gpt2, tiny_llama], ids=["gpt2", "llama"])
def test_generation_of_a_left_padded_batch_matches(build):
    """The patched head shows HF's forward signature, which generate reads: from the attention
    mask it builds the padded rows' positions (GPT-2's are absolute), and it passes the mask on.
    HF's Trainer keeps a batch's columns by the same signature."""
    import inspect

    ref = build(torch.float64)
    model = coda.patch(copy.deepcopy(ref))
    assert inspect.signature(model.forward) == inspect.signature(ref.forward)
    prompt = batch()[0][:, :8]
    mask = torch.ones_like(prompt)
    mask[0, :3] = 0
    options = dict(max_new_tokens=5, do_sample=False, pad_token_id=0, attention_mask=mask,
                   output_logits=True, return_dict_in_generate=True)
    got, want = model.generate(prompt, **options), ref.generate(prompt, **options)
    assert torch.equal(got.sequences, want.sequences)
    # (HF's eager float64 attention gives the padded row of the tiny LLaMA NaN logits, both models)
    torch.testing.assert_close(got.logits[0], want.logits[0], rtol=1e-9, atol=1e-9, equal_nan=True)


@pytest.mark.parametrize("build", [tiny_gpt2, tiny_llama, tiny_bert], ids=["gpt2", "llama", "bert"])
def test_a_hooked_submodule_runs_hfs_forward(build):
    """A forward hook on a patched layer's submodule (an ablation) fires and changes the output
    as in the unpatched model: the CODA forward, which calls no submodule, gives way to HF's
    while a hook is on; a global forward hook likewise."""
    ref = build(torch.float64)
    model = coda.patch(copy.deepcopy(ref))
    ids, labels = batch()

    def layer_mlp(m):
        layer = (m.transformer.h if build is tiny_gpt2 else m.bert.encoder.layer if build is tiny_bert
                 else m.model.layers)[0]
        return layer.output.dense if build is tiny_bert else layer.mlp

    fired = []
    handles = [layer_mlp(m).register_forward_hook(lambda mod, args, out: fired.append(1) or out * 0.5)
               for m in (ref, model)]
    got, want = (m(input_ids=ids, labels=labels).loss.double() for m in (model, ref))
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)   # (HF's loss is float32)
    assert len(fired) == 2
    for handle in handles:
        handle.remove()
    seen = []
    handle = torch.nn.modules.module.register_module_forward_hook(lambda mod, args, out: seen.append(mod))
    try:
        model(input_ids=ids)
    finally:
        handle.remove()
    assert any(m is layer_mlp(model) for m in seen)   # HF's forward called the layer's submodule


@pytest.mark.parametrize("build", [tiny_gpt2, tiny_llama], ids=["gpt2", "llama"])
def test_output_recorders_leave_the_layers_fused(build, monkeypatch):
    """transformers 5 leaves its output recorders (forward hooks) on every attention module from
    the first call with `output_hidden_states` or `output_attentions` on; counted as a user's
    hooks, they handed that call and every later one to HF's forward (an audit's find). The
    hidden states come from the fused layers as HF's; attention maps from HF's, for that call."""
    from coda.integrations import hf

    ref = build(torch.float64)
    model = coda.patch(copy.deepcopy(ref))
    fused, call = [], hf.ops.out_proj_residual
    monkeypatch.setattr(hf.ops, "out_proj_residual", lambda *a, **k: fused.append(1) or call(*a, **k))
    ids, labels = batch()
    layers = ref.config.num_hidden_layers
    for options, runs in (({}, layers), ({"output_hidden_states": True}, layers),
                          ({"output_attentions": True}, 0), ({"labels": labels}, layers)):
        fused.clear()
        got, want = model(input_ids=ids, **options), ref(input_ids=ids, **options)
        assert len(fused) == runs, options
        for name in ("hidden_states", "attentions"):
            for got_one, want_one in zip(got.get(name) or (), want.get(name) or (), strict=True):
                torch.testing.assert_close(got_one, want_one, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("build", [tiny_gpt2, tiny_bert], ids=["gpt2", "bert"])
def test_dropout_modules_in_eval_mode_apply_none(build):
    """In a model in training mode, an nn.Dropout put in eval mode applies no dropout, as
    calling it would: the patched forwards read each module's own mode, not their layer's.
    (HF's attention dropout follows its attention module's mode: left out here.)"""
    hidden = (dict(resid_pdrop=0.3, embd_pdrop=0.3, attn_pdrop=0.0) if build is tiny_gpt2
              else dict(hidden_dropout_prob=0.3, attention_probs_dropout_prob=0.0))
    model = coda.patch(build(torch.float64, **hidden)).train()
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout):
            m.eval()
    ids, labels = batch()
    losses = {model(input_ids=ids, labels=labels).loss.item() for _ in range(2)}
    assert losses == {model.eval()(input_ids=ids, labels=labels).loss.item()}


@pytest.mark.parametrize("build", [tiny_gpt2, tiny_bert], ids=["gpt2", "bert"])
def test_a_forward_that_raises_leaves_nothing_on_the_embedding(build):
    """A labelled forward that fails after the embedding ran (a sequence past the model's
    positions) takes back the tied table it was handed: nothing holds its graph, and the model
    still copies."""
    from coda.integrations import hf

    model = coda.patch(build(torch.float64)).train()
    ids = torch.randint(0, VOCAB, (1, 80))
    with pytest.raises((IndexError, RuntimeError)):
        model(input_ids=ids, labels=ids)
    assert not hf._handoff(model.get_input_embeddings())
    copy.deepcopy(model)


def test_two_threads_running_one_tied_model_each_take_their_own_table():
    """Two threads' labelled forwards through one patched GPT-2, interleaved (A's lookup, B's
    lookup, A's head, B's head): each head takes its own thread's table. On the module, B's
    table reached A's head, and the second backward failed ("backward through the graph a
    second time"; an audit's find)."""
    ref = tiny_gpt2(torch.float64)
    model = coda.patch(copy.deepcopy(ref))
    ids, labels = batch()
    expected = reference_loss(ref, ids, labels)
    expected.backward()
    a_looked_up, b_looked_up, a_done = threading.Event(), threading.Event(), threading.Event()

    def interleave(module, args, out):
        if threading.current_thread().name == "A":
            a_looked_up.set()
            b_looked_up.wait(10)
        else:
            b_looked_up.set()
            a_done.wait(10)

    model.get_input_embeddings().register_forward_hook(interleave)
    losses = {}

    def run() -> None:
        losses[threading.current_thread().name] = model(input_ids=ids, labels=labels).loss
        if threading.current_thread().name == "A":
            a_done.set()

    threads = [threading.Thread(target=run, name="A"), threading.Thread(target=run, name="B")]
    threads[0].start()
    a_looked_up.wait(10)
    threads[1].start()
    for thread in threads:
        thread.join()
    for name in "AB":
        torch.testing.assert_close(losses[name], expected, rtol=1e-10, atol=1e-10)
        losses[name].backward()
    for (name, param), want in zip(model.named_parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(param.grad, 2 * want.grad, rtol=1e-9, atol=1e-12, msg=name)


@pytest.mark.parametrize("build", [tiny_gpt2, tiny_bert])
def test_tied_head_takes_the_embeddings_table(monkeypatch, build):
    """A tied LM head's loss reads `tied_embedding`'s table (its weight gradient then joins the
    lookup's inside the embedding's backward: no zero-filled table, no autograd add); nothing is
    left on the embedding after a forward, with labels or without; the loss and the tied
    table's gradient match the unpatched model's (float32 through the interpreter)."""
    from coda.integrations import hf

    ref = build(torch.float32)
    model = coda.patch(copy.deepcopy(ref))
    table = model.get_input_embeddings()
    weights, call = [], hf.ops.linear_cross_entropy
    monkeypatch.setattr(hf.ops, "linear_cross_entropy",
                        lambda x, w, *a, **k: weights.append(w) or call(x, w, *a, **k))
    ids, labels = batch()
    if build is tiny_bert:
        labels[:, ::2] = -100
    out, expected = model(input_ids=ids, labels=labels), ref(input_ids=ids, labels=labels)
    (weight,) = weights
    assert weight is not table.weight and torch.equal(weight, table.weight.detach())
    assert weight.grad_fn is not None and not hf._handoff(table)
    torch.testing.assert_close(out.loss, expected.loss, rtol=2e-5, atol=2e-5)
    out.loss.backward()
    expected.loss.backward()
    want = ref.get_input_embeddings().weight.grad
    assert ((table.weight.grad - want).norm() / want.norm()).item() < 2e-5
    model(input_ids=ids)
    assert not hf._handoff(table)
