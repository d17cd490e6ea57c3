"""`coda.patch(model)`: run a loaded HuggingFace `transformers` model's non-attention compute
through `coda.ops`, in place.

Only the `forward` of submodule instances is replaced (`types.MethodType`); no module is swapped
and no parameter moved, so parameter names, `state_dict()` and checkpoints are unchanged, and
`model.load_state_dict` / `save_pretrained` work as before. Attention itself (scores, softmax,
attention dropout, KV cache, the attention-implementation choice) stays HF's.

Per family (docs/integrations.md, "HuggingFace models"):

- LLaMA (`LlamaModel`, `LlamaForCausalLM`), each `LlamaDecoderLayer`:
  `input_layernorm` + q/k/v projections -> `rms_norm_linear` (one GEMM against the concatenated
  `[wq; wk; wv]`), HF's rotate-half RoPE and attention, `o_proj` + residual -> `out_proj_residual`
  (which emits the next RMSNorm's row statistics), `post_attention_layernorm` + MLP + residual ->
  `swiglu_mlp` with the norm folded (`rstd` from those statistics, the gain in the weight).
- The LM head (`LlamaForCausalLM`): with `labels`, the head and HF's shifted causal-LM loss ->
  `linear_cross_entropy`, which never writes the logits (`logits` is None in the output).

Per-call costs that eager HF does not have: the concatenated q/k/v weight (LLaMA) and
`interleave(w_gate, w_up) * g` (LLaMA) are weight-sized copies per forward (autograd routes their
gradients back to the original parameters). Configurations the ops cannot reproduce exactly raise
`CodaError` naming the option.
"""

from __future__ import annotations

import types
from collections.abc import Callable

import torch
from torch import nn

from .. import compile as coda_compile
from .. import ops
from ..errors import CodaError

IGNORE_INDEX = -100  # HF's causal-LM loss default


def patch(model: nn.Module) -> nn.Module:
    """Patch `model` (and its submodules) in place; returns it. Idempotent."""
    patchers = _patchers()
    found = False
    for module in model.modules():
        patcher = patchers.get(type(module).__name__)
        if patcher is None or not type(module).__module__.startswith("transformers."):
            continue
        found = True
        if not getattr(module, "_coda_patched", False):
            forward = patcher(module)
            module.forward = types.MethodType(forward, module)
            module._coda_patched = True
    if not found:
        raise CodaError(f"coda.patch: no supported HuggingFace module in {type(model).__name__}; "
                        f"supported: {', '.join(sorted(patchers))}")
    return model


def _patchers() -> dict[str, Callable[[nn.Module], Callable]]:
    """Class name -> a function that checks one instance's config and returns its new forward."""
    return {"LlamaDecoderLayer": _llama_layer, "LlamaForCausalLM": _causal_lm}


def _refuse(module: nn.Module, option: str, value: object, supported: str) -> None:
    raise CodaError(f"coda.patch: {type(module).__name__} with config.{option} = {value!r} is not "
                    f"supported ({supported})")


# ---------------------------------------------------------------------------------------------- LLaMA

def _llama_layer(layer: nn.Module) -> Callable:
    config = layer.self_attn.config
    if config.hidden_act != "silu":
        _refuse(layer, "hidden_act", config.hidden_act, "only 'silu': the MLP runs as swiglu_mlp")
    if getattr(config, "mlp_bias", False):
        _refuse(layer, "mlp_bias", True, "swiglu_mlp has no biases")
    if (getattr(config, "pretraining_tp", 1) or 1) != 1:
        _refuse(layer, "pretraining_tp", config.pretraining_tp, "only 1")
    from transformers.models.llama import modeling_llama as hf

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None, cache=None, use_cache: bool | None = False,
                position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
                **kwargs) -> torch.Tensor:
        attn, mlp = self.self_attn, self.mlp
        norm1, norm2 = self.input_layernorm, self.post_attention_layernorm
        lead, d = hidden_states.shape[:-1], attn.head_dim
        projections = (attn.q_proj, attn.k_proj, attn.v_proj)
        w_qkv = torch.cat([p.weight for p in projections])
        b_qkv = torch.cat([p.bias for p in projections]) if attn.q_proj.bias is not None else None
        qkv = ops.rms_norm_linear(hidden_states, norm1.weight, w_qkv, eps=norm1.variance_epsilon,
                                  bias=b_qkv)
        q, k, v = (t.reshape(*lead, -1, d).transpose(1, 2)
                   for t in qkv.split([p.out_features for p in projections], dim=-1))
        cos, sin = position_embeddings
        q, k = hf.apply_rotary_pos_emb(q, k, cos, sin)
        if cache is not None:
            k, v = cache.update(k, v, attn.layer_idx, kwargs=kwargs)
        attention = hf.ALL_ATTENTION_FUNCTIONS.get_interface(config._attn_implementation,
                                                             hf.eager_attention_forward)
        out, _ = attention(attn, q, k, v, attention_mask, scaling=attn.scaling,
                           dropout=attn.attention_dropout if attn.training else 0.0, **kwargs)
        h, ss = ops.out_proj_residual(out.reshape(*lead, -1), attn.o_proj.weight, hidden_states,
                                      bias=attn.o_proj.bias, stats="rms")
        rstd = _RmsScale.apply(h, ss, norm2.variance_epsilon)
        w_gate_up = ops.interleave(mlp.gate_proj.weight, mlp.up_proj.weight) * norm2.weight[None, :]
        return ops.swiglu_mlp(h, w_gate_up, mlp.down_proj.weight, residual=h, rstd=rstd)

    return forward


class _RmsScale(torch.autograd.Function):
    """rstd = rsqrt(ss / n + eps) with ss = Σ h² from `out_proj_residual(stats="rms")`.

    That op marks `ss` non-differentiable (its consumer `rms_norm_linear(sumsq=)` differentiates
    through `x`), but `swiglu_mlp(rstd=)` returns `d rstd`, so this function carries it to `h`:
    dh = (d rstd · ∂rstd/∂ss · 2) ⊙_row h = (−d rstd · rstd³ / n) ⊙_row h, one CODA map.
    """

    @staticmethod
    def forward(ctx, h: torch.Tensor, ss: torch.Tensor, eps: float) -> torch.Tensor:
        rstd = torch.rsqrt(ss / h.shape[-1] + eps)
        ctx.save_for_backward(h, rstd)
        return rstd.to(h.dtype)

    @staticmethod
    def backward(ctx, drstd: torch.Tensor):
        h, rstd = ctx.saved_tensors
        coef = -drstd.to(rstd.dtype) * rstd ** 3 / h.shape[-1]
        rows, _ = ops.as_rows(h)
        dh = _SCALE_ROWS.map(rows, c=coef.reshape(-1))["output"].reshape(h.shape)
        return dh, None, None


_SCALE_ROWS = coda_compile("EPILOGUE scale_rows(c: row) { output = input * c; }")


# ------------------------------------------------------------------------------------- causal LM heads

def _causal_lm(model: nn.Module) -> Callable:
    config = model.config
    if getattr(config, "final_logit_softcapping", None):
        _refuse(model, "final_logit_softcapping", config.final_logit_softcapping, "no cap")
    original = type(model).forward

    def forward(self, *args, labels: torch.Tensor | None = None, **kwargs):
        if labels is None:
            return original(self, *args, **kwargs)
        from transformers.modeling_outputs import CausalLMOutputWithPast

        kwargs.pop("logits_to_keep", None)
        num_items = kwargs.pop("num_items_in_batch", None)
        shift_labels = kwargs.pop("shift_labels", None)
        outputs = getattr(self, self.base_model_prefix)(*args, **kwargs)
        hidden = outputs.last_hidden_state
        if shift_labels is None:  # HF: pad one ignored label at the end, then shift left
            pad = labels.new_full((*labels.shape[:-1], 1), IGNORE_INDEX)
            shift_labels = torch.cat((labels[..., 1:], pad), dim=-1)
        head = self.get_output_embeddings()
        loss = ops.linear_cross_entropy(hidden, head.weight, shift_labels.to(hidden.device),
                                        bias=head.bias, ignore_index=IGNORE_INDEX,
                                        reduction="mean" if num_items is None else "sum")
        if num_items is not None:
            loss = loss / (num_items.to(loss.device) if torch.is_tensor(num_items) else num_items)
        return CausalLMOutputWithPast(loss=loss, logits=None, cache=outputs.cache,
                                      hidden_states=outputs.hidden_states, attentions=outputs.attentions)

    return forward
