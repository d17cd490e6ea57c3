"""A LLaMA decoder block on `coda.ops`, with its eager twin (`fused=False`) on the same parameters.

Parameter names follow HF's `LlamaDecoderLayer` (`input_layernorm.weight`, `self_attn.{q,k,v,o}_proj
.weight`, `post_attention_layernorm.weight`, `mlp.{gate,up,down}_proj.weight`), but RoPE uses CODA's
interleaved convention (pair i of a head is columns (2i, 2i + 1)): to load an HF checkpoint, permute
its q_proj / k_proj rows with `coda.ops.permute_for_interleaved_rope` first. x is [B, T, dim];
attention is causal (torch SDPA), n_kv_heads < n_heads is grouped-query attention.

    a = x + attention(RMSNorm1(x)) @ o_proj.T
    y = a + down(silu(gate(RMSNorm2(a))) * up(RMSNorm2(a)))

fused forward (rstd_i = rsqrt(Σ x² / n + eps), g_i the norms' gains):
  q, k, v, x   = qkv_rope(x, [wq; wk; wv], norm_weight=g1, sumsq=ss1, passthrough=True)
                 one GEMM, the norm folded in, RoPE in its epilogue; ss1 = Σ x² given (the
                 previous block's `stats=True` output) or computed by the op
  a, ss2       = out_proj_residual(attn, wo, x, stats="rms")
  y (, ss)     = swiglu_mlp(a, interleave(wg, wu, gain=g2), wd, residual=a, sumsq=ss2, stats=)
Each op owns its norm (rstd from the row sums in its kernels, differentiated through its input)
and adds the residual's gradient in its dx kernel (`passthrough`, `residual=a`). Per call, the
concatenated q/k/v weight and the interleaved gate/up weight are weight-sized copies (their
gradients flow back to the parameters).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .. import ops
from ..errors import CodaError
from .modules import SwiGLUMLP, check_sequence, head_dim, rms_eps


def rope_tables(positions: torch.Tensor, head_dim: int, theta: float = 10000.0,
                dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [T, head_dim / 2] of angle positions[t] * theta^(-2i / head_dim)."""
    i = torch.arange(0, head_dim, 2, dtype=torch.float64, device=positions.device)
    inv_freq = theta ** -(i / head_dim)
    angles = positions.to(torch.float64)[:, None] * inv_freq
    return angles.cos().to(dtype), angles.sin().to(dtype)


def rope_interleaved(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Eager RoPE of x [B, T, heads, d] on pairs (2i, 2i + 1), cos / sin [T, d / 2]."""
    a, b = x[..., 0::2], x[..., 1::2]
    cos, sin = cos[:, None, :], sin[:, None, :]
    return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)


class LlamaBlock(nn.Module):
    def __init__(self, dim: int, n_heads: int, n_kv_heads: int, hidden: int, eps: float = 1e-6,
                 rope_theta: float = 10000.0, device: torch.device | None = None,
                 dtype: torch.dtype | None = None):
        super().__init__()
        kw = dict(device=device, dtype=dtype)
        self.n_heads, self.n_kv_heads, self.head_dim = n_heads, n_kv_heads, head_dim(dim, n_heads, n_kv_heads)
        if self.head_dim % 2:   # refused here, not by the fused path's first forward (the eager one runs)
            raise CodaError(f"head dimension {dim} // {n_heads} = {self.head_dim} must be even: RoPE "
                            f"rotates pairs of columns")
        if (isinstance(rope_theta, bool) or not isinstance(rope_theta, (int, float))
                or not 0 < rope_theta < math.inf):
            raise CodaError(f"rope_theta must be a positive number, got {rope_theta!r} (RoPE's angles "
                            f"scale by its powers)")
        self.rope_theta = rope_theta
        kv = n_kv_heads * self.head_dim
        self.input_layernorm = nn.RMSNorm(dim, eps=eps, **kw)
        self.self_attn = nn.ModuleDict({"q_proj": nn.Linear(dim, dim, bias=False, **kw),
                                        "k_proj": nn.Linear(dim, kv, bias=False, **kw),
                                        "v_proj": nn.Linear(dim, kv, bias=False, **kw),
                                        "o_proj": nn.Linear(dim, dim, bias=False, **kw)})
        self.post_attention_layernorm = nn.RMSNorm(dim, eps=eps, **kw)
        self.mlp = SwiGLUMLP(dim, hidden, **kw)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Causal GQA of q [B, T, n_heads, d], k, v [B, T, n_kv_heads, d] -> [B, T, n_heads * d]."""
        group = self.n_heads // self.n_kv_heads
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return out.transpose(1, 2).flatten(2)

    def forward(self, x: torch.Tensor, sumsq: torch.Tensor | None = None, stats: bool = False,
                fused: bool = True) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """x [B, T, dim] -> y [B, T, dim]; with stats=True also Σ y² per row (float32, [B, T]), the
        next block's `sumsq` (its input RMSNorm then skips its statistics pass). The eager twin
        (fused=False) ignores `sumsq`."""
        check_sequence("LlamaBlock", x, self.input_layernorm.weight.shape[0])
        cos, sin = rope_tables(torch.arange(x.shape[1], device=x.device), self.head_dim, self.rope_theta,
                               x.dtype)
        attn, mlp = self.self_attn, self.mlp
        if not fused:
            return self._eager(x, cos, sin, stats)
        w_qkv = torch.cat([attn[name].weight for name in ("q_proj", "k_proj", "v_proj")])
        q, k, v, x = ops.qkv_rope(x, w_qkv, cos, sin, self.n_heads, self.n_kv_heads, self.head_dim,
                                  norm_weight=self.input_layernorm.weight,
                                  eps=rms_eps(self.input_layernorm, x), sumsq=sumsq, passthrough=True)
        a, ss = ops.out_proj_residual(self.attend(q, k, v), attn["o_proj"].weight, x, stats="rms")
        w_gate_up = ops.interleave(mlp.gate_proj.weight, mlp.up_proj.weight,
                                   gain=self.post_attention_layernorm.weight)
        return ops.swiglu_mlp(a, w_gate_up, mlp.down_proj.weight, residual=a, stats=stats, sumsq=ss,
                              eps=rms_eps(self.post_attention_layernorm, a))

    def _eager(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, stats: bool):
        """The same block in plain PyTorch (the reference for the fused path)."""
        attn, mlp = self.self_attn, self.mlp
        h = self.input_layernorm(x)
        heads = (self.n_heads, self.n_kv_heads, self.n_kv_heads)
        q, k, v = (F.linear(h, attn[name].weight).unflatten(-1, (n, self.head_dim))
                   for name, n in zip(("q_proj", "k_proj", "v_proj"), heads, strict=True))
        q, k = rope_interleaved(q, cos, sin), rope_interleaved(k, cos, sin)
        a = x + F.linear(self.attend(q, k, v), attn["o_proj"].weight)
        h = self.post_attention_layernorm(a)
        y = a + mlp.down_proj(F.silu(mlp.gate_proj(h)) * mlp.up_proj(h))
        return (y, y.to(torch.promote_types(y.dtype, torch.float32)).square().sum(-1)) if stats else y
