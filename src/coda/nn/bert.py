"""A BERT encoder layer (post-LN) on `coda.ops`, with its eager twin (`fused=False`) on the same
parameters.

Parameter names follow HF's `BertLayer` (`attention.self.{query,key,value}`,
`attention.output.{dense,LayerNorm}`, `intermediate.dense`, `output.{dense,LayerNorm}`), so the
layer's slice of a BERT checkpoint loads as it is. x is [B, T, dim]; attention is bidirectional
torch SDPA with an optional `attention_mask` (SDPA's: boolean, True = attend, or additive).

    a = LayerNorm1(x + dropout(attention(x) @ wo.T + bo))
    y = LayerNorm2(a + dropout(f(a @ wi.T + bi) @ wo2.T + bo2))

fused forward
  q, k, v       = linear(x, [wq; wk; wv], [bq; bk; bv])    one GEMM (the concatenation is a per-call
                                                           weight-sized copy)
  a', ss, s     = out_proj_residual(attn, wo, x, bo, dropout, stats="layer")
  a             = coda.nn.layer_norm(a', rowsum=s, sumsq=ss)   (statistics from the GEMM's epilogue)
  i             = linear(a, wi, bi, activation="gelu_erf")
  y', ss, s     = out_proj_residual(i, wo2, a, bo2, dropout, stats="layer");  y = layer_norm(y', ...)
Hidden dropout runs only in training, with CODA's counter-based masks in the fused path and
torch's in the eager twin (same p, different masks). Attention dropout is not modelled.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .. import ops
from .layer_norm import layer_norm
from .modules import check_options, check_sequence, head_dim

#: coda.ops activation name -> the eager function (every activation `coda.ops.linear` takes)
EAGER_ACTIVATIONS = {None: lambda t: t, "gelu_erf": F.gelu, "gelu": lambda t: F.gelu(t, approximate="tanh"),
                     "relu": F.relu, "silu": F.silu, "squared_relu": lambda t: F.relu(t).square()}


class BertLayer(nn.Module):
    def __init__(self, dim: int, n_heads: int, hidden: int, eps: float = 1e-12, dropout: float = 0.0,
                 activation: str = "gelu_erf", device: torch.device | None = None,
                 dtype: torch.dtype | None = None):
        super().__init__()
        kw = dict(device=device, dtype=dtype)
        head_dim(dim, n_heads)
        check_options(activation, dropout)
        self.n_heads, self.dropout, self.activation = n_heads, dropout, activation
        self.attention = nn.ModuleDict({
            "self": nn.ModuleDict({name: nn.Linear(dim, dim, **kw) for name in ("query", "key", "value")}),
            "output": nn.ModuleDict({"dense": nn.Linear(dim, dim, **kw),
                                     "LayerNorm": nn.LayerNorm(dim, eps, **kw)}),
        })
        self.intermediate = nn.ModuleDict({"dense": nn.Linear(dim, hidden, **kw)})
        self.output = nn.ModuleDict({"dense": nn.Linear(hidden, dim, **kw),
                                     "LayerNorm": nn.LayerNorm(dim, eps, **kw)})

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               attention_mask: torch.Tensor | None) -> torch.Tensor:
        """Multi-head attention of q, k, v [B, T, dim] -> [B, T, dim]."""
        q, k, v = (t.unflatten(-1, (self.n_heads, -1)).transpose(1, 2) for t in (q, k, v))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attention_mask)
        return out.transpose(1, 2).flatten(2)

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor | None = None,
                fused: bool = True) -> torch.Tensor:
        check_sequence("BertLayer", x, self.intermediate["dense"].in_features)
        p = self.dropout if self.training else 0.0
        qkv_layers = list(self.attention["self"].values())
        out1, norm1 = self.attention["output"]["dense"], self.attention["output"]["LayerNorm"]
        inner, out2, norm2 = self.intermediate["dense"], self.output["dense"], self.output["LayerNorm"]
        if not fused:
            q, k, v = (layer(x) for layer in qkv_layers)
            a = norm1(x + F.dropout(out1(self.attend(q, k, v, attention_mask)), p, self.training))
            i = EAGER_ACTIVATIONS[self.activation](inner(a))
            return norm2(a + F.dropout(out2(i), p, self.training))
        w_qkv = torch.cat([layer.weight for layer in qkv_layers])
        b_qkv = torch.cat([layer.bias for layer in qkv_layers])
        q, k, v = ops.linear(x, w_qkv, b_qkv).chunk(3, dim=-1)
        a, ss, s = ops.out_proj_residual(self.attend(q, k, v, attention_mask), out1.weight, x, bias=out1.bias,
                                         dropout_p=p, stats="layer")
        a = layer_norm(a, norm1.weight, norm1.bias, norm1.eps, rowsum=s, sumsq=ss)
        i = ops.linear(a, inner.weight, inner.bias, activation=self.activation)
        y, ss, s = ops.out_proj_residual(i, out2.weight, a, bias=out2.bias, dropout_p=p, stats="layer")
        return layer_norm(y, norm2.weight, norm2.bias, norm2.eps, rowsum=s, sumsq=ss)
