"""`coda.patch(model)`: run a loaded HuggingFace `transformers` model's non-attention compute
through `coda.ops`, in place.

Only the `forward` of submodule instances is replaced (each patched instance becomes one of a
subclass of its class, of the same name, that defines it: `_replace_method`); no module is swapped
and no parameter moved, so parameter names, `state_dict()` and checkpoints are unchanged, and
`model.load_state_dict` / `save_pretrained` work as before. Attention itself (scores, softmax,
attention dropout, KV cache, the attention-implementation choice) stays HF's.

Per family (docs/integrations.md, "HuggingFace models"):

- LLaMA (`LlamaModel`, `LlamaForCausalLM`), each `LlamaDecoderLayer`, and the models built the
  same way, Mistral (`MistralDecoderLayer`, `MistralForCausalLM`: sliding-window attention is
  HF's), Qwen2 (`Qwen2DecoderLayer`, `Qwen2ForCausalLM`: biased q/k/v projections) and Qwen3
  (`Qwen3DecoderLayer`, `Qwen3ForCausalLM`: q and k normalized per head before RoPE, so its
  q/k/v GEMM is `rms_norm_linear` and the per-head norms and RoPE are HF's) and Phi-3
  (`Phi3DecoderLayer`, `Phi3ForCausalLM`: q/k/v and gate/up each one weight, used by row blocks)
  and Gemma (`GemmaDecoderLayer`, `GemmaForCausalLM`: tanh-GELU gating, so `geglu_mlp`; norms
  scaling by 1 + weight, `_rms_gain`; a token embedding scaled by sqrt(hidden)):
  `input_layernorm` + q/k/v projections + RoPE -> `qkv_rope(norm_weight=)` (one GEMM against the
  concatenated `[wq; wk; wv]`, the norm folded in, q and k rows permuted within heads, rotated in
  the epilogue in CODA's interleaved convention, equal to HF's rotate-half on the permuted rows),
  HF's attention,
  `o_proj` + residual -> `out_proj_residual`
  (which emits the next RMSNorm's row statistics), `post_attention_layernorm` + MLP + residual ->
  `swiglu_mlp` with the norm folded (`sumsq=` those statistics, the gain in the weight: one
  `interleave(w_gate, w_up, gain=)` pass); its dx kernel adds the residual's and the norm's
  gradients, so h's whole gradient from the MLP comes out of one kernel. Its down GEMM sums
  Σ y² for the next layer's `input_layernorm`, which then runs no statistics map; the last
  layer's, for the model's final `norm` -> `coda.nn.rms_norm` (`_final_norm`).
- Gemma 2 and 3 (`Gemma2ForCausalLM`, `Gemma3ForCausalLM`), module by module: a layer normalizes
  each sublayer's output before its residual add, which no epilogue can do, so the layers' forwards
  stay HF's and their RMSNorms (scaling by 1 + weight) -> `coda.nn.rms_norm`, their MLPs ->
  `geglu_mlp`; the LM head's soft cap (`final_logit_softcapping`) goes into `linear_cross_entropy`.
- GPT-2 (`GPT2Model`, `GPT2LMHeadModel`), each `GPT2Block`: `ln_1` + `c_attn` ->
  `layer_norm_linear` (Conv1D weights [in, out] are used as `w.T` views, no copies), HF's attention,
  `c_proj` + residual -> `out_proj_residual(stats="layer")`, `ln_2` -> `coda.nn.layer_norm` on those
  sums, `c_fc` + tanh-GELU + `c_proj` + residual -> `mlp(..., "gelu", residual=, stats="layer")`,
  whose row sums go with the block's output to the next block's `ln_1` (or to `ln_f`, then
  `coda.nn.layer_norm`), so only the first block's norm sums its input in a map of its own.
  Hidden dropout in training maps to the ops' dropout (same p, CODA's counter-based masks, not
  torch's RNG stream).
- BERT (`BertModel`, `BertForMaskedLM`, ...; and the layers of RoBERTa, XLM-RoBERTa, CamemBERT
  and ELECTRA, built module for module as BERT's): `BertSelfAttention`'s query, key and value
  projections -> one `linear` against the concatenated `[wq; wk; wv]` (one GEMM forward, its dx
  in one GEMM instead of three and two adds, its bias gradient in one column sum instead of
  three), HF's attention (its weights are not returned: `attn_weights` is None; with
  `output_attentions=True` the layers run HF's forward, `_guarded`);
  `BertSelfOutput` (dense + dropout + residual + post-LN) -> `out_proj_residual(stats="layer")` +
  `coda.nn.layer_norm` on the sums; `BertLayer`'s feed-forward (`BertIntermediate` +
  `BertOutput`) -> one `mlp(..., residual=x, stats="layer")` + `coda.nn.layer_norm` on the sums
  (the activation's derivative in the epilogue of the GEMM that forms its input gradient, and
  the residual's gradient added in dx's); the MLM head's `BertPredictionHeadTransform`
  (dense + activation + LayerNorm) -> `linear(..., activation=)` + `coda.nn.layer_norm`.
- The token embedding of every model (a plain `nn.Embedding`, or Gemma's scaled one) ->
  `coda.ops.embedding`: torch's lookup forward, the table's gradient in one deterministic sorted
  pass (one Triton kernel that writes every row) instead of PyTorch's segment reductions and
  zero-fill.
- The LM heads (`LlamaForCausalLM` and its Mistral, Qwen2, Qwen3, Phi-3 and Gemma kin, `GPT2LMHeadModel`,
  `BertForMaskedLM`): with `labels`, the
  head's decoder and HF's loss (shifted causal-LM / masked-LM cross-entropy) ->
  `linear_cross_entropy`, which never writes the logits (`logits` is None in the output).

Per-call costs that eager HF does not have: the concatenated q/k/v weight (LLaMA, BERT) and
`interleave(w_gate, w_up, gain=g)` (LLaMA) are weight-sized copies per forward (autograd routes their
gradients back to the original parameters); GPT-2 and BERT's other layers use the parameters as
they are.
Configurations the ops cannot reproduce exactly raise `CodaError` naming the option.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import inspect
import sys
import threading
import warnings
import weakref
from collections.abc import Callable, Iterator

import torch
from torch import nn

from .. import ops
from ..errors import CodaError
from ..ops.common import device_constant

IGNORE_INDEX = -100  # HF's causal-LM loss default


#: the encoders built as BERT is, module for module (their layers take BERT's patchers)
BERT_LIKE = ("Bert", "Roberta", "XLMRoberta", "Camembert", "Electra")
#: the method a patcher replaces, where it is not `forward`
PATCHED_METHODS = {f"{family}Layer": "feed_forward_chunk" for family in BERT_LIKE}
#: the base models whose last norm is patched (`_final_norm`), their own forward staying HF's
FINAL_NORM_MODELS = ("GPT2Model", "LlamaModel", "MistralModel", "Qwen2Model", "Qwen3Model", "Phi3Model",
                     "GemmaModel")


#: Gemma 2's and 3's layers normalize each sublayer's output before its residual add, which no
#: epilogue can do (the norm needs the whole row of the GEMM's output before the add): their
#: layers' forwards stay HF's, and their RMSNorms and gated MLPs are patched one by one
SANDWICH_FAMILIES = ("Gemma2", "Gemma3")
#: the RMSNorms whose gain is 1 + weight (`_rms_gain`)
OFFSET_GAIN_NORMS = ("GemmaRMSNorm", *(f"{family}RMSNorm" for family in SANDWICH_FAMILIES))
#: the LM heads, and whether each skips its ignored labels' rows unless told (`patch`)
SKIPS_IGNORED = {"LlamaForCausalLM": False, "MistralForCausalLM": False, "Qwen2ForCausalLM": False,
                 "Qwen3ForCausalLM": False, "Phi3ForCausalLM": False, "GemmaForCausalLM": False,
                 "Gemma2ForCausalLM": False, "Gemma3ForCausalLM": False,
                 "GPT2LMHeadModel": False, "BertForMaskedLM": True}


def patch(model: nn.Module, *, skip_ignored_labels: bool | None = None) -> nn.Module:
    """Patch `model` (and its submodules) in place; returns it. Idempotent. All or nothing: where
    a configuration is refused (`CodaError`), no module is left patched.

    `skip_ignored_labels`: whether the LM head's cross-entropy spends no GEMM work on the rows
    labelled -100 (`linear_cross_entropy(skip_ignored=True)`): worth it where many rows are
    (a masked LM's 85%, the prompts of supervised fine-tuning), a small cost where none are.
    Default: on for masked LMs, off for causal LMs."""
    if not isinstance(model, nn.Module):
        raise CodaError(f"coda.patch takes a torch.nn.Module (a HuggingFace model), got "
                        f"{type(model).__name__}")
    if skip_ignored_labels is not None and not isinstance(skip_ignored_labels, bool):
        raise CodaError(f"coda.patch: skip_ignored_labels must be None or a bool, got "
                        f"{skip_ignored_labels!r}")
    sharded = next((name or "the model" for name, m in model.named_modules() if _fsdp_sharded(m)), None)
    if sharded is not None:   # FSDP2 renames each sharded module's class: no layer would be found
        raise CodaError(f"coda.patch: {sharded} is already sharded by FSDP (fully_shard); patch the "
                        f"model first, then shard it")
    # all or nothing: a configuration refused part way leaves the model as it was
    kept = [(m, type(m), {k: m.__dict__[k] for k in PATCH_ATTRIBUTES if k in m.__dict__})
            for m in model.modules()]
    try:
        _patch_modules(model, skip_ignored_labels)
    except CodaError:
        for module, cls, attributes in kept:
            module.__class__ = cls
            for key in PATCH_ATTRIBUTES:
                module.__dict__.pop(key, None)
            module.__dict__.update(attributes)
        raise
    return model


#: what `patch` sets on a module besides its class (`_replace_method`)
PATCH_ATTRIBUTES = ("_coda_patched", "_coda_skip_ignored")


def _patch_modules(model: nn.Module, skip_ignored_labels: bool | None) -> None:
    """`patch`'s work: every supported module's forward replaced, then the input embedding's."""
    patchers = _patchers()
    found = False
    for module in model.modules():
        name = type(module).__name__
        patcher = patchers.get(name)
        if patcher is None or not type(module).__module__.startswith("transformers."):
            continue
        found = True
        if name in SKIPS_IGNORED:   # read by the head's forward: a second patch may change it
            module._coda_skip_ignored = (SKIPS_IGNORED[name] if skip_ignored_labels is None
                                         else skip_ignored_labels)
        if not getattr(module, "_coda_patched", False):
            watched = _watched(module, name)
            foreign = sorted({f"{type(m).__module__}.{type(m).__qualname__}"
                              for m in _reached(module, watched) if _foreign(m)})
            if foreign:   # e.g. a LoRA adapter, a quantized linear: HF's forward calls them, CODA's not
                warnings.warn(f"coda.patch: {type(module).__name__} holds {', '.join(foreign)}, which its "
                              f"CODA forward would not call: it keeps HF's forward", stacklevel=2)
                continue
            method_name = PATCHED_METHODS.get(name, "forward")
            _replace_method(module, method_name, _guarded(patcher(module), getattr(type(module), method_name),
                                                          watched))
            module._coda_patched = True
    if not found:
        raise CodaError(f"coda.patch: no supported HuggingFace module in {type(model).__name__}; "
                        f"supported: {', '.join(sorted(patchers))}")
    _patch_input_embeddings(model)


#: where the submodules a CODA forward replaces come from: torch's layers (and parametrizations: a
#: parametrized layer's weight reads as computed), transformers' model files, activations and
#: GPT-2's Conv1D. Others compute what it would not: PEFT's LoRA layers, the quantized linears of
#: torch.ao and of transformers.integrations (BitNet's nn.Linear subclass quantizes in its forward)
NATIVE = ("torch.nn.modules.", "torch.nn.utils.parametriz", "transformers.models.",
          "transformers.activations", "transformers.pytorch_utils")


def _foreign(module: nn.Module) -> bool:
    """Whether a CODA forward, which reads the submodule's parameters and calls none of it, would
    compute something else than the submodule does: one from outside NATIVE, or an nn.Identity
    put where the layer had a norm or a projection."""
    return not type(module).__module__.startswith(NATIVE) or isinstance(module, nn.Identity)


def _watched(module: nn.Module, name: str) -> tuple[tuple[tuple[str, ...], type, tuple[bool, bool]], ...]:
    """What a patched forward reads, as (path of submodule names from `module`, the submodule's
    type, whether it has a weight and a bias): a layer's every submodule below it; an LM head's output
    embedding (the layers are patched on their own); BERT's feed-forward, its two halves; a base
    model, nothing (its last norm is patched in place, `_final_norm`)."""
    if name in FINAL_NORM_MODELS:
        return ()
    roots = ([module.get_output_embeddings()] if name in SKIPS_IGNORED
             else [module.intermediate, module.output] if name in PATCHED_METHODS else [module])
    paths = {id(m): tuple(path.split(".")) if path else () for path, m in module.named_modules()}
    # (not the module itself: patching makes it an instance of a subclass, `_replace_method`)
    return tuple((paths[id(m)], type(m), _held(m)) for root in roots for m in root.modules()
                 if m is not module)


def _held(module: nn.Module | None) -> tuple[bool, bool]:
    """Whether a submodule holds a weight and a bias: a patched forward that reads only weights
    where it had no bias (a gated MLP's projections) would leave out one attached since, and
    one that reads them would fail on a weight or bias set to None since."""
    return _holds(module, "weight"), _holds(module, "bias")


def _holds(module: nn.Module | None, name: str) -> bool:
    """Whether `module.name` is a tensor, without computing a parametrized one (every forward
    asks)."""
    parameters = getattr(module, "_parameters", {})
    if name in parameters:
        return parameters[name] is not None
    parametrized = getattr(module, "_modules", {}).get("parametrizations")   # no __getattr__ miss
    return (parametrized is not None and name in parametrized) or getattr(module, name, None) is not None


def _reached(module: nn.Module, watched) -> list[nn.Module | None]:
    """The submodules at the watched paths of `module`, as they are now (None where one is gone)."""
    found = []
    for path, *_ in watched:
        node = module
        for key in path:
            node = getattr(node, "_modules", {}).get(key)
        found.append(node)
    return found


def _replace_method(module: nn.Module, name: str, method: Callable) -> None:
    """`module.name` becomes `method` by making the instance one of a subclass of its class that
    defines it (same name, module and qualified name): a copy made as nn.DataParallel makes its
    replicas (`__dict__` copied, not the class) calls it on itself, where a bound method kept in
    the instance's `__dict__` would run on the original module. Copies (`copy.copy`,
    `copy.deepcopy`) stay patched; pickling (`torch.save(model)`) stores the module as its
    original class, unpatched (`coda.patch` it again after loading): the subclass exists only in
    this process."""
    cls = type(module)
    module.__class__ = type(cls.__name__, (cls,), {
        name: method, "__module__": cls.__module__, "__qualname__": cls.__qualname__,
        "__copy__": _copy, "__deepcopy__": _deepcopy, "__reduce_ex__": _reduce_unpatched})


def _copy(self: nn.Module) -> nn.Module:
    twin = type(self).__new__(type(self))
    twin.__dict__.update(self.__dict__)
    return twin


def _deepcopy(self: nn.Module, memo: dict) -> nn.Module:
    twin = type(self).__new__(type(self))
    memo[id(self)] = twin
    twin.__dict__.update(copy.deepcopy(self.__dict__, memo))
    return twin


def _reduce_unpatched(self: nn.Module, protocol: int) -> tuple:
    # the class the patch derived from (FSDP2, say, may have derived another from the patch's)
    patched = next(c for c in type(self).__mro__ if c.__dict__.get("__reduce_ex__") is _reduce_unpatched)
    state = {key: value for key, value in self.__dict__.items() if key != "_coda_patched"}
    return _unpickled, (patched.__bases__[0], state)


def _unpickled(cls: type, state: dict) -> nn.Module:
    """A patched module as pickled: an instance of its original class, unpatched."""
    module = cls.__new__(cls)
    module.__setstate__(state)
    return module


def _guarded(method: Callable, original: Callable, watched) -> Callable:
    """`method`, run while every watched submodule has the type (and has or lacks the weight and
    bias) it had when the module was patched and no forward hook or pre-hook (its own or a global
    one: an ablation, a `weight_norm`'s recomputed weight); HF's `original` once one has been
    replaced (a LoRA adapter injected after `coda.patch`, say, which the CODA forward would not
    call) or hooked, since the CODA forward reads the submodules' weights and calls none of them:
    never a silent wrong answer. HF's `original` too while HF records attention maps
    (`output_attentions=True`), and while `method.declines(module)` (a patcher's own condition:
    Phi-3's residual dropouts, which the CODA forward does not apply, given a p since)."""
    recording_attentions = _attention_recorder()
    declines = getattr(method, "declines", lambda module: False)

    @functools.wraps(method)   # its signature: HF's feed-forward chunking counts the parameters
    def forward(self, *args, **kwargs):
        reached = _reached(self, watched)
        if not recording_attentions() and not _global_hooks() and all(
                type(m) is kind and _held(m) == held and not _hooked(m)
                for m, (_, kind, held) in zip(reached, watched, strict=True)) and not declines(self):
            return method(self, *args, **kwargs)
        sharded = [".".join(path) for m, (path, *_) in zip(reached, watched, strict=True) if _fsdp_sharded(m)]
        if sharded:
            warnings.warn(f"coda.patch: {original.__qualname__.split('.')[0]}'s {', '.join(sharded)} is "
                          f"sharded by FSDP on its own (its weights are gathered in its own forward, "
                          f"which CODA's does not call): HF's forward runs (for an LM head, the logits "
                          f"in memory); shard it with its parent instead", stacklevel=2)
        return original(self, *args, **kwargs)

    return forward


#: Where transformers 5's output recorders come from: hooks it leaves on every attention module
#: from the first call with `output_hidden_states` or `output_attentions` on, which read only
#: while a call collects (the attention maps' case is `_attention_recorder`'s). Counted as hooks,
#: they handed every later call of the layers to HF's forward, for good.
OUTPUT_RECORDERS = "transformers.utils.output_capturing"


def _hooked(module: nn.Module | None) -> bool:
    """Whether `module` has a forward hook or pre-hook other than transformers' output recorders
    (read on every forward of a patched layer: no hooks at all is the common case, and cheap)."""
    if module is None or not (module._forward_hooks or module._forward_pre_hooks):
        return False
    return any(getattr(hook, "__module__", "") != OUTPUT_RECORDERS
               for hooks in (module._forward_hooks, module._forward_pre_hooks) for hook in hooks.values())


def _fsdp_sharded(module: nn.Module | None) -> bool:
    """Whether FSDP shards `module` (FSDP2's `fully_shard`, or FSDP1's wrapper)."""
    if module is None or not torch.distributed.is_available():
        return False
    from torch.distributed.fsdp import FSDPModule, FullyShardedDataParallel
    return isinstance(module, (FSDPModule, FullyShardedDataParallel))


def _dropout_p(dropout: nn.Dropout) -> float:
    """What an nn.Dropout applies now, by its own mode as calling it would (a model in training
    mode may hold a Dropout put in eval mode): its p, or 0."""
    return dropout.p if dropout.training else 0.0


def _global_hooks() -> bool:
    """Whether forward hooks are registered for every module (`nn.modules.module.
    register_module_forward_hook` and its pre-hook twin)."""
    hooks = nn.modules.module
    return bool(hooks._global_forward_hooks or hooks._global_forward_pre_hooks)


def _attention_recorder() -> Callable[[], bool]:
    """Whether HF is collecting attention maps now. transformers 5 records them with hooks on its
    attention modules' outputs while `output_attentions` is on; the patched forwards call no such
    module (and return no weights), so the maps would silently be missing: the layers then run
    HF's forward. Releases without that collector: never. While Dynamo traces, the collector is
    readable only once HF has set it for the trace (its `compiling` flag): before, nothing records."""
    try:
        from transformers.utils.output_capturing import _active_collector
    except ImportError:
        return lambda: False

    def recording() -> bool:
        if torch.compiler.is_compiling() and not getattr(_active_collector, "compiling", False):
            return False   # Dynamo cannot trace the ContextVar's get
        collected = _active_collector.get()
        return collected is not None and "attentions" in collected

    return recording


#: HF's token embeddings that scale the rows they look up by their `embed_scale` (Gemma's)
SCALED_EMBEDDINGS = ("GemmaTextScaledWordEmbedding", "Gemma2TextScaledWordEmbedding",
                     "Gemma3TextScaledWordEmbedding")


def _patch_input_embeddings(model: nn.Module) -> None:
    """The model's token embedding -> `coda.ops.embedding` (its table's gradient in one sorted
    pass), where it is a plain `nn.Embedding` or one of SCALED_EMBEDDINGS (no max_norm,
    scale_grad_by_freq or sparse)."""
    table = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    scaled = type(table).__name__ in SCALED_EMBEDDINGS and type(table).__module__.startswith("transformers.")
    if ((type(table) is not nn.Embedding and not scaled) or _lookup_options(table)
            or getattr(table, "_coda_patched", False)):
        return
    original = type(table).forward

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if _lookup_options(self):   # set since: HF's lookup (the tied head then reads its weight)
            return original(self, ids)
        handoff = _handoff(self)
        if handoff.pop(TIE_NEXT, False):   # the tied LM head of this forward takes the table
            # (in place: the table is the head's alone, no hook or autograd.grad reads its gradient)
            y, shared = ops.tied_embedding(ids, self.weight, self.padding_idx, in_place=True)
            handoff[TIED_TABLE] = shared
        else:
            y = ops.embedding(ids, self.weight, self.padding_idx)
        return y * self.embed_scale.to(self.weight.dtype) if scaled else y

    _replace_method(table, "forward", forward)
    table._coda_patched = True


def _lookup_options(table: nn.Embedding) -> bool:
    """Whether an embedding looks up as `coda.ops.embedding` does not: max_norm (renormalizing
    the table in place), scale_grad_by_freq, sparse (a sparse gradient)."""
    return table.max_norm is not None or table.scale_grad_by_freq or table.sparse


#: Set for the token embedding by an LM head's forward that will compute its loss (`_tied_table_asked`),
#: taken by the embedding's next forward, which then leaves `tied_embedding`'s table under
#: TIED_TABLE for the head (`_head_loss`): the head's weight gradient then arrives in the
#: embedding's backward, which adds the tokens' rows into it (ops/embedding.py).
TIE_NEXT, TIED_TABLE = "_coda_tie_next", "_coda_tied_table"
#: each thread's hand-offs (`_handoff`)
_HANDOFFS = threading.local()


def _handoff(table: nn.Module) -> dict:
    """This thread's hand-off between `table` and its head: two threads running one model each
    hand over their own (on the module itself, one thread's table reached the other's head).
    While Dynamo traces, on the module (it guards a thread-local's weak keys, which then fail)."""
    if torch.compiler.is_compiling():
        return table.__dict__.setdefault("_coda_handoff", {})
    if not hasattr(_HANDOFFS, "tables"):
        _HANDOFFS.tables = weakref.WeakKeyDictionary()
    return _HANDOFFS.tables.setdefault(table, {})


def _patchers() -> dict[str, Callable[[nn.Module], Callable]]:
    """Class name -> a function that checks one instance's config and returns its new forward
    (or the method PATCHED_METHODS names)."""
    return {"LlamaDecoderLayer": _llama_layer, "LlamaForCausalLM": _causal_lm,
            "MistralDecoderLayer": _llama_layer, "MistralForCausalLM": _causal_lm,
            "Qwen2DecoderLayer": _llama_layer, "Qwen2ForCausalLM": _causal_lm,
            "Qwen3DecoderLayer": _llama_layer, "Qwen3ForCausalLM": _causal_lm,
            "Phi3DecoderLayer": _llama_layer, "Phi3ForCausalLM": _causal_lm,
            "GemmaDecoderLayer": _llama_layer, "GemmaForCausalLM": _causal_lm,
            **{f"{family}{part}": patcher for family in SANDWICH_FAMILIES for part, patcher in (
                ("RMSNorm", _rms_norm_module), ("MLP", _gated_mlp_module), ("ForCausalLM", _causal_lm))},
            "GPT2Block": _gpt2_block, "GPT2LMHeadModel": _causal_lm,
            **{name: _final_norm for name in FINAL_NORM_MODELS},
            "BertPredictionHeadTransform": _bert_head_transform, "BertForMaskedLM": _masked_lm,
            **{f"{family}{part}": patcher for family in BERT_LIKE for part, patcher in (
                ("SelfAttention", _bert_self_attention), ("SelfOutput", _bert_output),
                ("Layer", _bert_feed_forward))}}


def _attend(hf, attn: nn.Module, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attention_mask,
            dropout: float, cache, kwargs: dict, interleaved: bool = False) -> torch.Tensor:
    """HF's attention of the layer (its KV cache updated first), [B, heads, T, d] -> [B, T, heads, d].
    The cache comes under either name transformers has given it: `cache`, and `past_key_values`
    in the 5.1x releases; of an EncoderDecoderCache (a decoder with cross-attention, as BERT can
    be) the self-attention part is this layer's, as in HF's own attention. `interleaved`: q and k
    come with each head's values in the LLaMA layer's interleaved-RoPE order. The cache gets
    HF's keys, as the unpatched layer's, which may read them on a later step (or have written
    the earlier ones); where it holds no other keys (a training step's cache) attention takes q
    and k as they came, else q in HF's order too."""
    cache = cache if cache is not None else kwargs.pop("past_key_values", None)
    cache = getattr(cache, "self_attention_cache", cache)
    if cache is not None:
        keys, values = cache.update(_rotate_half_order(k) if interleaved else k, v, attn.layer_idx,
                                    kwargs=kwargs)
        if not interleaved or keys.shape[-2] != k.shape[-2]:
            q = _rotate_half_order(q) if interleaved else q
            k, v = keys, values
    attention = hf.ALL_ATTENTION_FUNCTIONS.get_interface(attn.config._attn_implementation,
                                                         hf.eager_attention_forward)
    # Mistral's and Qwen2's sliding window, as their attention passes it (the mask has it too)
    window = getattr(attn, "sliding_window", getattr(attn.config, "sliding_window", None))
    if window is not None:
        kwargs = kwargs | {"sliding_window": window}
    out, _ = attention(attn, q, k, v, attention_mask, scaling=attn.scaling, dropout=dropout, **kwargs)
    return out


def _rotate_half_order(t: torch.Tensor) -> torch.Tensor:
    """t [..., d] from interleaved pairs (2i, 2i + 1) back to rotate_half's (i, i + d/2): the
    inverse of `ops.permute_for_interleaved_rope` on each head's values."""
    return t.unflatten(-1, (-1, 2)).transpose(-1, -2).flatten(-2)


def _refuse(module: nn.Module, option: str, value: object, supported: str) -> None:
    raise CodaError(f"coda.patch: {type(module).__name__} with config.{option} = {value!r} is not "
                    f"supported ({supported})")


# ---------------------------------------------------------------------------------------------- LLaMA

def _partial_rotary_factor(config) -> float:
    """The share of a head RoPE rotates: a config attribute, or (transformers 5) an entry of
    `rope_parameters`."""
    rope = getattr(config, "rope_parameters", None)
    factor = rope.get("partial_rotary_factor") if isinstance(rope, dict) else None
    return float(factor or getattr(config, "partial_rotary_factor", None) or 1.0)


#: the gated MLP's activation (HF's name) -> the op that runs the MLP: "silu" and "swish" are one
#: function; both tanh-GELU names are the tanh approximation, the ops' "gelu" (Gemma's)
GATED_MLPS = {"silu": "swiglu_mlp", "swish": "swiglu_mlp", "gelu_pytorch_tanh": "geglu_mlp",
              "gelu_new": "geglu_mlp"}


def _rms_gain(norm: nn.Module) -> tuple[torch.Tensor, float]:
    """An HF RMSNorm's gain and eps as CODA's norms take them: the weight of LLaMA's and its
    kin's; Gemma's `1 + weight`, which its forward scales by, in float32 (or wider): the gain
    folded into a GEMM's weight, or applied by `coda.nn.rms_norm`, is rounded once, with the
    product, as Gemma's normalized rows are."""
    if type(norm).__name__ in OFFSET_GAIN_NORMS:
        w = norm.weight
        return 1.0 + w.to(torch.promote_types(w.dtype, torch.float32)), norm.eps
    return norm.weight, norm.variance_epsilon


def _gated_mlp_op(owner: nn.Module, mlp: nn.Module) -> str:
    """The op that runs a gated MLP, by the class of the activation module its forward calls
    (`act_fn`; Phi-3's `activation_fn`), which the config only named when the model was built:
    one replaced since would otherwise be computed as the config's."""
    act = _hf_activation_name(mlp.act_fn if hasattr(mlp, "act_fn") else mlp.activation_fn)
    if act not in GATED_MLPS:
        raise CodaError(f"coda.patch: {type(owner).__name__} with the MLP activation {act!r} (the "
                        f"config's hidden_act / hidden_activation, or the module put in its place) is not "
                        f"supported (only 'silu' / 'swish': swiglu_mlp, or 'gelu_pytorch_tanh' / "
                        f"'gelu_new': geglu_mlp)")
    return GATED_MLPS[act]


def _rms_norm_module(norm: nn.Module) -> Callable:
    """Gemma 2's and 3's RMSNorms (each layer's four, q's and k's per head, the final one) ->
    `coda.nn.rms_norm`: one map forward, the one-pass kernel backward, rounded once from float32
    as HF's are."""
    from ..nn.layer_norm import rms_norm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = rms_norm(x, *_rms_gain(self))
        return y.to(x.dtype)   # HF's type_as(x); under autocast coda.nn.rms_norm's is float32

    return forward


def _gated_mlp_module(mlp: nn.Module) -> Callable:
    """Gemma 2's and 3's MLPs, down(act(gate(x)) * up(x)) -> `geglu_mlp` (or `swiglu_mlp`, by
    the activation) on x as given: their norm before it is patched on its own."""
    op = _gated_mlp_op(mlp, mlp)
    if any(p.bias is not None for p in (mlp.gate_proj, mlp.up_proj, mlp.down_proj)):
        raise CodaError(f"coda.patch: {type(mlp).__name__} with biases is not supported ({op} has none)")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return getattr(ops, op)(x, ops.interleave(self.gate_proj.weight, self.up_proj.weight),
                                self.down_proj.weight)

    return forward


def _llama_layer(layer: nn.Module) -> Callable:
    config = layer.self_attn.config
    mlp_op = _gated_mlp_op(layer, layer.mlp)
    if getattr(config, "mlp_bias", False):
        _refuse(layer, "mlp_bias", True, f"{mlp_op} has no biases")
    if (getattr(config, "pretraining_tp", 1) or 1) != 1:
        _refuse(layer, "pretraining_tp", config.pretraining_tp, "only 1")
    if (rotary := _partial_rotary_factor(config)) != 1.0:   # Phi-4-mini's 0.75
        _refuse(layer, "partial_rotary_factor", rotary, "only 1.0: qkv_rope rotates whole heads")
    # Phi-3's dropouts on the attention's and the MLP's outputs, which the fused ops do not apply
    resid_dropouts = [name for name in ("resid_attn_dropout", "resid_mlp_dropout") if hasattr(layer, name)]
    resid_p = max([getattr(config, "resid_pdrop", 0.0), *(getattr(layer, name).p for name in resid_dropouts)])
    if resid_p:
        _refuse(layer, "resid_pdrop", resid_p, f"only 0.0: {mlp_op} has no dropout")
    hf = sys.modules[type(layer).__module__]   # its model's attention functions
    qk_norm = hasattr(layer.self_attn, "q_norm")
    heads = config.num_attention_heads, config.num_key_value_heads

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None, cache=None, use_cache: bool | None = False,
                position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
                **kwargs) -> torch.Tensor:
        attn, mlp = self.self_attn, self.mlp
        (g1, eps1), (g2, eps2) = _rms_gain(self.input_layernorm), _rms_gain(self.post_attention_layernorm)
        lead, d = hidden_states.shape[:-1], attn.head_dim
        weights, biases = _qkv_parameters(attn, heads, d)
        _, ss = _carried_sums(hidden_states, self)   # the previous layer's down GEMM took it
        if qk_norm:   # Qwen3: q and k normalized per head before RoPE, both HF's
            w_qkv = torch.cat(weights)
            b_qkv = None if biases is None else torch.cat(biases)
            qkv, hidden_states = ops.rms_norm_linear(hidden_states, g1, w_qkv, eps1, bias=b_qkv,
                                                     sumsq=ss, passthrough=True)
            q, k, v = (t.view(*lead, -1, d) for t in qkv.split([w.shape[0] for w in weights], -1))
            q, k = hf.apply_rotary_pos_emb(attn.q_norm(q).transpose(1, 2), attn.k_norm(k).transpose(1, 2),
                                           *position_embeddings)
            v = v.transpose(1, 2)
        else:
            # HF's rotate_half tables [..., d] repeat one half of angles; q and k rows are permuted
            # within each head so that CODA's interleaved rotation (in the GEMM's epilogue) is
            # HF's rotation. The scores are unchanged (q and k permuted alike); v keeps its order.
            cos, sin = (t[..., :d // 2] for t in position_embeddings)
            w_qkv = _qkv_rows(weights, 2, d)
            b_qkv = None if biases is None else _qkv_rows(biases, 2, d)
            *qkv, hidden_states = ops.qkv_rope(hidden_states, w_qkv, cos, sin, *heads, d, bias=b_qkv,
                                               norm_weight=g1, eps=eps1, sumsq=ss, passthrough=True)
            q, k, v = (t.transpose(1, 2) for t in qkv)
        out = _attend(hf, attn, q, k, v, attention_mask, attn.attention_dropout if attn.training else 0.0,
                      cache, kwargs, interleaved=not qk_norm)
        h, ss = ops.out_proj_residual(out.reshape(*lead, -1), attn.o_proj.weight, hidden_states,
                                      bias=attn.o_proj.bias, stats="rms")
        w_gate, w_up = ((mlp.gate_proj.weight, mlp.up_proj.weight) if hasattr(mlp, "gate_proj")
                        else mlp.gate_up_proj.weight.chunk(2))   # Phi-3: [gate; up] in one weight
        w_gate_up = ops.interleave(w_gate, w_up, gain=g2)
        y, ss = getattr(ops, mlp_op)(h, w_gate_up, mlp.down_proj.weight, residual=h, sumsq=ss, eps=eps2,
                                     stats=True)
        return _carry_sums(y, None, ss, self)

    # a p given to them since: HF's forward applies them
    forward.declines = lambda self: any(_dropout_p(getattr(self, name)) for name in resid_dropouts)
    return forward




def _qkv_parameters(attn: nn.Module, heads: tuple[int, int], d: int
                    ) -> tuple[list[torch.Tensor], list[torch.Tensor] | None]:
    """The q, k and v projections' weights and biases (None without biases): their own modules'
    or, for Phi-3's fused `qkv_proj`, its row blocks."""
    if hasattr(attn, "qkv_proj"):
        sizes = [heads[0] * d, heads[1] * d, heads[1] * d]
        bias = attn.qkv_proj.bias
        return list(attn.qkv_proj.weight.split(sizes)), None if bias is None else list(bias.split(sizes))
    projections = (attn.q_proj, attn.k_proj, attn.v_proj)
    biases = None if attn.q_proj.bias is None else [p.bias for p in projections]
    return [p.weight for p in projections], biases


def _qkv_rows(parts: list[torch.Tensor], rotated: int, d: int) -> torch.Tensor:
    """The q, k, v weights (or biases) stacked as one [N, ...] tensor, the rows of the first
    `rotated` parts (q and k) reordered per head from rotate_half's pairs (i, i + d/2) to
    interleaved pairs (2i, 2i + 1), as `ops.permute_for_interleaved_rope` does."""
    if torch.compiler.is_compiling():   # Inductor fuses the views and the cat into one kernel
        return _stacked_views(parts, rotated, d)
    return StackedRows.apply(rotated, d, *parts)


def _stacked_views(parts: list[torch.Tensor], rotated: int, d: int) -> torch.Tensor:
    """`_qkv_rows` as the cat of permuted views (what torch.compile traces)."""
    tail = parts[0].shape[1:]
    heads = [p.view(p.shape[0] // d, 2, d // 2, *tail) for p in parts]   # [heads, half, i, ...]
    return torch.cat([h.transpose(1, 2) if i < rotated else h.view(h.shape[0], d // 2, 2, *tail)
                      for i, h in enumerate(heads)]).view(-1, *tail)


class StackedRows(torch.autograd.Function):
    """`_qkv_rows` in eager mode: each rotated part's rows gathered into its block of the
    stacked tensor (whole contiguous rows at a time), and its gradient gathered back by the
    inverse order, dense. The cat of the permuted views, which autograd differentiates through,
    copied them element by element, and q's and k's gradients came back as strided views that
    AccumulateGrad copied again: at LLaMA-492M's size 27.5 µs a layer forward and 48.7 forward
    and backward, against 8.3 and 25.7 this way (H100, docs/benchmarks-log.md, 54th session)."""

    @staticmethod
    def forward(ctx, rotated: int, d: int, *parts: torch.Tensor) -> torch.Tensor:
        ctx.rotated, ctx.d, ctx.sizes = rotated, d, [p.shape[0] for p in parts]
        stacked = parts[0].new_empty(sum(ctx.sizes), *parts[0].shape[1:])
        for i, (part, block) in enumerate(zip(parts, stacked.split(ctx.sizes), strict=True)):
            if i < rotated:
                torch.index_select(part, 0, _interleaved_order(part.shape[0], d, part.device), out=block)
            else:
                block.copy_(part)
        return stacked

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        grads, needs = [], ctx.needs_input_grad[2:]
        for i, (block, needed) in enumerate(zip(grad.split(ctx.sizes), needs, strict=True)):
            if needed and i < ctx.rotated:
                block = torch.index_select(block, 0, _interleaved_order(block.shape[0], ctx.d,
                                                                         block.device, inverse=True))
            grads.append(block if needed else None)
        return None, None, *grads


def _interleaved_order(rows: int, d: int, device: torch.device, inverse: bool = False) -> torch.Tensor:
    """Row indices that reorder `rows` rows (whole heads of d) from rotate_half's pairs to
    interleaved ones (`permute_for_interleaved_rope`'s order), or back with `inverse`; made once
    per device (`device_constant`)."""
    def make() -> torch.Tensor:
        return ops.permute_for_interleaved_rope(torch.arange(rows, device=device), rows // d, d, inverse)
    return device_constant(("interleaved order", rows, d, device, inverse), make)


# ---------------------------------------------------------------------------------------------- GPT-2

GPT2_ACTIVATIONS = ("gelu_new", "gelu_pytorch_tanh")  # both the tanh approximation: ops' "gelu"


def _gpt2_block(block: nn.Module) -> Callable:
    config = block.attn.config
    # the activation module the MLP calls, which the config only named when the model was built
    if (act := _hf_activation_name(block.mlp.act)) not in GPT2_ACTIVATIONS:
        _refuse(block, "activation_function", act, f"only {' / '.join(GPT2_ACTIVATIONS)}: the MLP runs as "
                f"mlp(..., 'gelu'); the config's name, or the module put in its place")
    if config.add_cross_attention:
        _refuse(block, "add_cross_attention", True, "no cross-attention block")
    if config.reorder_and_upcast_attn:
        _refuse(block, "reorder_and_upcast_attn", True, "HF's float32 attention path is not called")
    from transformers.models.gpt2 import modeling_gpt2 as hf

    from ..nn.layer_norm import layer_norm

    def forward(self, hidden_states: torch.Tensor, cache=None, attention_mask: torch.Tensor | None = None,
                encoder_hidden_states: torch.Tensor | None = None, encoder_attention_mask=None,
                use_cache: bool | None = False, **kwargs) -> torch.Tensor:
        if encoder_hidden_states is not None:  # as HF does without add_cross_attention
            raise ValueError(f"{type(self).__name__} has no cross-attention (add_cross_attention=False)")
        attn, mlp, ln1, ln2 = self.attn, self.mlp, self.ln_1, self.ln_2
        lead, d = hidden_states.shape[:-1], attn.head_dim
        resid_p = _dropout_p(attn.resid_dropout)
        # Conv1D stores weight [in, out]: w.T is the nn.Linear-layout [out, in] view (no copy).
        # passthrough: the residual's gradient joins hidden_states' inside the norm's dx kernel
        # split: q, k, v as blocks of the GEMM's output, whose gradients (from SDPA's backward)
        # the backward GEMMs read where they are instead of concatenating them
        s, ss = _carried_sums(hidden_states, self)   # the previous block's fc2 took them
        *qkv, hidden_states = ops.layer_norm_linear(hidden_states, ln1.weight, ln1.bias,
                                                    attn.c_attn.weight.T, bias=attn.c_attn.bias,
                                                    eps=ln1.eps, rowsum=s, sumsq=ss, passthrough=True,
                                                    split=[attn.split_size] * 3)
        q, k, v = (t.reshape(*lead, -1, d).transpose(1, 2) for t in qkv)
        out = _attend(hf, attn, q, k, v, attention_mask,
                      attn.attn_dropout.p if attn.training else 0.0, cache, kwargs)
        h, ss, s = ops.out_proj_residual(out.reshape(*lead, -1), attn.c_proj.weight.T, hidden_states,
                                         bias=attn.c_proj.bias, dropout_p=resid_p, stats="layer")
        x, h = layer_norm(h, ln2.weight, ln2.bias, ln2.eps, rowsum=s, sumsq=ss, passthrough=True)
        y, ss, s = ops.mlp(x, mlp.c_fc.weight.T, mlp.c_fc.bias, mlp.c_proj.weight.T, mlp.c_proj.bias,
                           "gelu", dropout_p=_dropout_p(mlp.dropout), residual=h,
                           stats="layer")
        return _carry_sums(y, s, ss, self)

    return forward


def _final_norm(model: nn.Module) -> Callable:
    """A base model's last norm -> CODA's on the row sums the last layer's closing GEMM took
    (`_carry_sums`), so that it runs no statistics map of its own: GPT-2's `ln_f` (an
    nn.LayerNorm) -> `coda.nn.layer_norm`, LLaMA's and its kin's `norm` (the family's RMSNorm,
    HF's float32 round trip) -> `coda.nn.rms_norm` in one pass. Patched in place (the layers are
    patched on their own); the model's own forward stays HF's, and a norm of another kind HF's."""
    from ..nn.layer_norm import layer_norm, rms_norm

    def ln_f(self, x: torch.Tensor) -> torch.Tensor:
        if self.weight is None or self.bias is None:   # set to None since: torch's
            return nn.LayerNorm.forward(self, x)
        s, ss = _carried_sums(x, self)
        return layer_norm(x, self.weight, self.bias, self.eps, rowsum=s, sumsq=ss)

    def rms_f(self, x: torch.Tensor) -> torch.Tensor:
        y = rms_norm(x, *_rms_gain(self), sumsq=_carried_sums(x, self)[1])
        return y.to(x.dtype) if type(self).__name__ in OFFSET_GAIN_NORMS else y   # Gemma's type_as(x)

    family = type(model).__name__.removesuffix("Model")
    norm = getattr(model, "ln_f" if family == "GPT2" else "norm", None)
    if isinstance(norm, nn.LayerNorm) and norm.weight is not None and norm.bias is not None:
        _replace_method(norm, "forward", ln_f)
    elif type(norm).__name__ == f"{family}RMSNorm" and type(norm).__module__.startswith("transformers."):
        _replace_method(norm, "forward", rms_f)
    return type(model).forward


#: the attribute by which a block's output y carries its row sums Σ y and Σ y² (taken in the
#: epilogue of the GEMM that formed y) to the norm that reads y next, which then needs no map
#: of its own to sum them. Kept on y's storage (`_carrier`), which y detached shares: a
#: reentrant checkpoint recomputes a layer on its input detached, and must use the sums the
#: first forward used, else the recomputed layer differs from it by the rounding of the sums
#: (gradients off by about an ulp in bf16). With a weak reference to y and y's layout and
#: version: the sums hold while y is unchanged and are given to y, or a tensor sharing y's
#: memory and version counter (y detached). Not under torch.compile (Dynamo keeps no
#: attribute), nor on inference tensors (`torch.inference_mode`: they have no version
#: counter): there each norm sums its input.
CARRIED_SUMS = "_coda_row_sums"


def _carrier(t: torch.Tensor) -> object:
    """What holds t's carried sums: its storage, or a tensor subclass itself (whose storage
    may not be reachable)."""
    return t.untyped_storage() if type(t) is torch.Tensor else t


def _layout(t: torch.Tensor) -> tuple:
    return t.storage_offset(), t.shape, t.stride(), t.dtype, t._version


def _carry_sums(y: torch.Tensor, s: torch.Tensor | None, ss: torch.Tensor, module: nn.Module) -> torch.Tensor:
    """y, carrying its row sums unless `module`, whose output it is, has a forward hook of the
    user's (which may change y through `.data`, which no version counter sees)."""
    if not torch.compiler.is_compiling() and not y.is_inference() and not _user_hooks(module._forward_hooks):
        setattr(_carrier(y), CARRIED_SUMS, (s, ss, weakref.ref(y), _layout(y)))
    return y


def _carried_sums(x: torch.Tensor, module: nn.Module) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """(Σ x, Σ x²) per row if x is a tensor out of `_carry_sums`, unchanged, or one sharing its
    memory and version counter (Σ x None where an RMSNorm comes next), else (None, None); also
    (None, None) where `module`, which x enters, has a forward pre-hook of the user's (it may
    change x through `.data`)."""
    if torch.compiler.is_compiling() or x.is_inference() or _user_hooks(module._forward_pre_hooks):
        return None, None
    s, ss, ref, layout = getattr(_carrier(x), CARRIED_SUMS, (None, None, lambda: None, None))
    y = ref()
    if y is None or _layout(y) != layout or _layout(x) != layout:
        return None, None
    return s, ss


def _user_hooks(hooks: dict) -> bool:
    """Whether a module's forward hooks or pre-hooks hold one of the user's: not HF's (transformers 5
    installs output recorders, which only read, on every layer) nor torch's (FSDP2's, on each
    sharded layer, gather and free its parameters)."""
    return any(not getattr(hook, "__module__", "").startswith(("transformers.", "torch."))
               for hook in hooks.values())


# ----------------------------------------------------------------------------------------------- BERT

BERT_ACTIVATIONS = {"gelu": "gelu_erf", "gelu_new": "gelu", "gelu_pytorch_tanh": "gelu", "relu": "relu"}


def _bert_self_attention(attn: nn.Module) -> Callable:
    """BertSelfAttention: q, k and v from one GEMM against [wq; wk; wv] (+ [bq; bk; bv]), then
    HF's attention, as `_gpt2_block` does with GPT-2's fused c_attn."""
    hf = sys.modules[type(attn).__module__]   # its model's attention functions

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None,
                cache=None, **kwargs) -> tuple[torch.Tensor, None]:
        lead, d = hidden_states.shape[:-1], self.attention_head_size
        projections = (self.query, self.key, self.value)   # nn.Linear(..., bias=True) each
        # q, k and v's gradients are concatenated for cuBLAS's dx and dw GEMMs: CODA's GEMM reading
        # them in place (a Concat, as GPT-2's layer_norm_linear does) measured slower here
        qkv = ops.linear(hidden_states, torch.cat([p.weight for p in projections]),
                         torch.cat([p.bias for p in projections]))
        q, k, v = (t.reshape(*lead, -1, d).transpose(1, 2) for t in qkv.split(self.all_head_size, dim=-1))
        out = _attend(hf, self, q, k, v, attention_mask, self.dropout.p if self.training else 0.0,
                      cache, kwargs)
        return out.reshape(*lead, -1), None

    return forward


def _bert_output(output: nn.Module) -> Callable:
    """BertSelfOutput: LayerNorm(dropout(dense(x)) + input), post-LN."""
    from ..nn.layer_norm import layer_norm

    def forward(self, hidden_states: torch.Tensor, input_tensor: torch.Tensor) -> torch.Tensor:
        norm = self.LayerNorm
        y, ss, s = ops.out_proj_residual(hidden_states, self.dense.weight, input_tensor, bias=self.dense.bias,
                                         dropout_p=_dropout_p(self.dropout), stats="layer")
        return layer_norm(y, norm.weight, norm.bias, norm.eps, rowsum=s, sumsq=ss)

    return forward


def _bert_feed_forward(layer: nn.Module) -> Callable:
    """BertLayer.feed_forward_chunk, BertIntermediate then BertOutput:
    LayerNorm(dropout(dense2(act(dense1(x)))) + x), one `mlp` with the residual x itself and the
    norm's row sums from fc2's epilogue."""
    activation = _bert_activation(layer.intermediate, layer.intermediate.intermediate_act_fn)
    from ..nn.layer_norm import layer_norm

    def feed_forward_chunk(self, attention_output: torch.Tensor) -> torch.Tensor:
        fc1, fc2, norm = self.intermediate.dense, self.output.dense, self.output.LayerNorm
        y, ss, s = ops.mlp(attention_output, fc1.weight, fc1.bias, fc2.weight, fc2.bias, activation,
                           dropout_p=_dropout_p(self.output.dropout),
                           residual=attention_output, stats="layer")
        return layer_norm(y, norm.weight, norm.bias, norm.eps, rowsum=s, sumsq=ss)

    return feed_forward_chunk


def _bert_head_transform(module: nn.Module) -> Callable:
    """BertPredictionHeadTransform (the MLM head's): LayerNorm(act(dense(x))), the activation in
    the GEMM's epilogue."""
    activation = _bert_activation(module, module.transform_act_fn)
    from ..nn.layer_norm import layer_norm

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        y = ops.linear(hidden_states, self.dense.weight, self.dense.bias, activation=activation)
        return layer_norm(y, self.LayerNorm.weight, self.LayerNorm.bias, self.LayerNorm.eps)

    return forward


def _bert_activation(module: nn.Module, fn: object) -> str:
    """CODA's name for a BERT module's activation function; CodaError if the ops lack it."""
    act = _hf_activation_name(fn)
    if act not in BERT_ACTIVATIONS:
        _refuse(module, "hidden_act", act, f"only {', '.join(BERT_ACTIVATIONS)}")
    return BERT_ACTIVATIONS[act]


def _hf_activation_name(fn: object) -> str:
    """BERT's modules keep no config: the HF name (`hidden_act`) of its activation module's class,
    the supported ones' first, else the class name (a callable `hidden_act` is never supported)."""
    from transformers.activations import ACT2CLS

    for name in (*BERT_ACTIVATIONS, *ACT2CLS):
        cls = ACT2CLS[name]
        if type(fn) is (cls[0] if isinstance(cls, tuple) else cls):
            return name
    return getattr(fn, "__name__", type(fn).__name__)


# ------------------------------------------------------------------------------------- causal LM heads

def _causal_lm(model: nn.Module) -> Callable:
    original = type(model).forward

    def forward(self, *args, labels: torch.Tensor | None = None, **kwargs):
        if labels is None:
            return original(self, *args, **kwargs)
        from transformers.modeling_outputs import CausalLMOutputWithPast

        # the KV cache's field: `cache` since transformers 5.2x, `past_key_values` before
        field = "cache" if "cache" in CausalLMOutputWithPast.__dataclass_fields__ else "past_key_values"

        keep = kwargs.pop("logits_to_keep", 0)   # HF's: the last `keep` positions (0: all), or indices
        num_items = kwargs.pop("num_items_in_batch", None)
        shift_labels = kwargs.pop("shift_labels", None)
        return_dict = _return_dict(self, kwargs)
        with _tied_table_asked(self):
            outputs = getattr(self, self.base_model_prefix)(*args, return_dict=True, **kwargs)
            hidden = outputs.last_hidden_state[:, slice(-keep, None) if isinstance(keep, int) else keep]
            if shift_labels is None:  # HF: pad one ignored label at the end, then shift left
                pad = labels.new_full((*labels.shape[:-1], 1), IGNORE_INDEX)
                shift_labels = torch.cat((labels[..., 1:], pad), dim=-1)
            loss = _head_loss(self, hidden, shift_labels, "mean" if num_items is None else "sum",
                              self._coda_skip_ignored, getattr(self.config, "final_logit_softcapping", None))
        if num_items is not None:
            loss = loss / (num_items.to(loss.device) if torch.is_tensor(num_items) else num_items)
        output = CausalLMOutputWithPast(loss=loss, logits=None, hidden_states=outputs.hidden_states,
                                        attentions=outputs.attentions,
                                        **{field: getattr(outputs, field, None)})
        return output if return_dict else _as_tuple(output)

    forward.__signature__ = inspect.signature(original)   # what generate and Trainer read
    return forward


def _masked_lm(model: nn.Module) -> Callable:
    """BertForMaskedLM: with `labels`, the head's decoder and HF's cross-entropy (mean over the
    labels other than -100) -> `linear_cross_entropy`; the transform before it is patched on its
    own (`BertPredictionHeadTransform`)."""
    original = type(model).forward

    def forward(self, *args, labels: torch.Tensor | None = None, **kwargs):
        if labels is None:
            return original(self, *args, **kwargs)
        from transformers.modeling_outputs import MaskedLMOutput

        return_dict = _return_dict(self, kwargs)
        with _tied_table_asked(self):
            outputs = self.bert(*args, return_dict=True, **kwargs)
            hidden = self.cls.predictions.transform(outputs.last_hidden_state)
            loss = _head_loss(self, hidden, labels, "mean", self._coda_skip_ignored)
        output = MaskedLMOutput(loss=loss, logits=None,
                                hidden_states=outputs.hidden_states, attentions=outputs.attentions)
        return output if return_dict else _as_tuple(output)

    forward.__signature__ = inspect.signature(original)   # what Trainer reads
    return forward


def _as_tuple(output) -> tuple:
    """A patched head's output with `return_dict=False`: HF's tuple, `logits` None in its place
    (`to_tuple()` leaves None fields out, which would move what follows into logits' place)."""
    return (output.loss, None, *output.to_tuple()[1:])


@contextlib.contextmanager
def _tied_table_asked(model: nn.Module) -> Iterator[None]:
    """Around a head's forward with labels: its patched token embedding hands out its table if
    the head shares it (tied weights) and a gradient will be formed; what the forward leaves
    behind is taken back when it ends, also when it raises (a table left holding a graph would
    keep its memory; a flag left by a forward that ran no embedding, given inputs_embeds, would
    reach the next one)."""
    table, head = model.get_input_embeddings(), model.get_output_embeddings()
    if (getattr(table, "_coda_patched", False) and head is not None and head.weight is table.weight
            and torch.is_grad_enabled() and table.weight.requires_grad):
        _handoff(table)[TIE_NEXT] = True
    try:
        yield
    finally:
        if table is not None:
            _handoff(table).clear()


def _return_dict(model: nn.Module, kwargs: dict) -> bool:
    """HF's `return_dict` for this call (the argument, taken out of `kwargs`, else the config's).
    The patched heads run their base model with `return_dict=True` (they read its fields) and,
    as HF's `can_return_tuple` does, give `output.to_tuple()` where it is False."""
    wanted = kwargs.pop("return_dict", None)
    return getattr(model.config, "return_dict", True) if wanted is None else bool(wanted)


def _head_loss(model: nn.Module, hidden: torch.Tensor, labels: torch.Tensor, reduction: str,
               skip_ignored: bool, softcap: float | None = None) -> torch.Tensor:
    """Cross-entropy of the model's output embedding (the decoder, [V, H] and its bias) applied to
    `hidden`, its logits capped at `softcap` (Gemma 2's final_logit_softcapping: c tanh(z / c)),
    against `labels` (-100: ignored), without the logits in memory."""
    head, table = model.get_output_embeddings(), model.get_input_embeddings()
    weight = _handoff(table).pop(TIED_TABLE, head.weight)
    return ops.linear_cross_entropy(hidden, weight, labels.to(hidden.device), bias=head.bias,
                                    ignore_index=IGNORE_INDEX, reduction=reduction,
                                    skip_ignored=skip_ignored, softcap=softcap or None)


#: unpadded_batches' blocks open now, in any thread, and the transformers functions they replaced
_UNPADDED = {"blocks": 0, "originals": {}}
_UNPADDED_LOCK = threading.Lock()


@contextlib.contextmanager
def unpadded_batches() -> Iterator[None]:
    """Within the block, transformers takes a missing attention mask for "no padding" also while a
    CUDA graph is being captured or Dynamo traces (torch.compile), and looks for no packed
    sequences: the `context` of `coda.capture_step`, and the block to compile and run in, for a
    HuggingFace model trained on batches without padding and packing.

    Under capture and under Dynamo transformers 5.17 treats the step like tracing, where a mask's
    values cannot be read, and builds a full [B, 1, T, T] mask even without padding (5.24 with
    PyTorch 2.13 skips it under Dynamo); SDPA then loses its fused kernels' causal skip (on the
    H200 GPT-2's attention took 9.2 instead of 4.3 ms under capture, BERT's ran as float32 math,
    LLaMA's took 27.1 instead of 10.2 ms a step under torch.compile). Later releases make this
    distinction themselves. With padded or packed batches do not use it: pass the attention mask
    and run without it. It replaces functions of transformers' module, for the whole process:
    while a block is open in one thread, the others' models see it too; the first block to open
    replaces them and the last to close puts them back (blocks of several threads may close in
    any order)."""
    from transformers import masking_utils

    with _UNPADDED_LOCK:
        if _UNPADDED["blocks"] == 0:
            replacements = _unpadded_replacements(_UNPADDED["originals"])
            # the originals, of the names this transformers release has (the replacements call them)
            _UNPADDED["originals"].clear()
            _UNPADDED["originals"].update({name: getattr(masking_utils, name) for name in replacements
                                           if hasattr(masking_utils, name)})
            for name in _UNPADDED["originals"]:
                setattr(masking_utils, name, replacements[name])
        _UNPADDED["blocks"] += 1
    try:
        yield
    finally:
        with _UNPADDED_LOCK:
            _UNPADDED["blocks"] -= 1
            if _UNPADDED["blocks"] == 0:
                for name, value in _UNPADDED["originals"].items():
                    setattr(masking_utils, name, value)


def _unpadded_replacements(saved: dict[str, Callable]) -> dict[str, Callable]:
    """`unpadded_batches`' versions of transformers' mask functions, which call the originals
    in `saved` where a mask or padding is given."""
    def within(kv_length: int, local_attention_size: int | None) -> bool:
        return local_attention_size is None or kv_length < local_attention_size

    def causal_skip(padding_mask, q_length, kv_length, q_offset, kv_offset, local_attention_size=None):
        # no padding, a square mask, no cache offset to read: SDPA's is_causal is that mask
        if (padding_mask is None and q_length == kv_length and not isinstance(q_offset, torch.Tensor)
                and within(kv_length, local_attention_size)):
            return True
        return saved["_ignore_causal_mask_sdpa"](padding_mask, q_length, kv_length, q_offset, kv_offset,
                                                 local_attention_size)

    def bidirectional_skip(padding_mask, kv_length, local_attention_size=None):
        if padding_mask is None and within(kv_length, local_attention_size):
            return True
        return saved["_ignore_bidirectional_mask_sdpa"](padding_mask, kv_length, local_attention_size)

    return {"is_tracing": lambda tensor=None: tensor is not None and saved["is_tracing"](tensor),
            "find_packed_sequence_indices": lambda position_ids: None,
            "_ignore_causal_mask_sdpa": causal_skip,
            "_ignore_bidirectional_mask_sdpa": bidirectional_skip}
