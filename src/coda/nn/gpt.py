"""GPT-2 on CODA: a decoder-only Transformer whose every layer but attention is a CODA program.

    x = wte[idx] + wpe[0..T)                           token and learned position embeddings
    x = x + attn_out(attention(qkv(ln_1(x))))          in each block: pre-LN, causal self-attention,
    x = x + fc2(gelu(fc1(ln_2(x))))                    then the MLP (GELU, tanh approximation)
    loss = cross_entropy(ln_f(x) @ wte.T, targets)     the LM head is tied to the token embedding

`fused=True` runs a block as (coda.ops, except attention)
    q, k, v, x = layer_norm_linear(x, ln_1, qkv)        ln_1 folded into the QKV GEMM (x passed through)
    y        = scaled_dot_product_attention(q, k, v)    PyTorch (a flash kernel on a GPU)
    x, ss, s = out_proj_residual(y, attn_out, x)        + residual; the epilogue also sums x's rows
    h, x     = layer_norm(x, ln_2, rowsum=s, sumsq=ss)  one map program (coda.nn.layer_norm)
    x        = mlp(h, fc1, "gelu", fc2, residual=x)     fc1 + bias + GELU | fc2 + bias + residual
and the head as h = layer_norm(x, ln_f), loss = linear_cross_entropy(h, wte, targets): the
[tokens, vocab] logits are never written. The backward passes are CODA programs too (each op's
autograd.Function); the embedding gather and add are plain PyTorch.
`fused=False` runs the same parameters through torch.nn.functional: the eager reference for parity
tests and `coda train --compare`.

Mixed precision: parameters stay in their own dtype (float32 master weights); with
`compute_dtype=torch.bfloat16` every weight is cast on use, as autocast would, and the
activations are bfloat16. The head is tied (as in GPT-2 and nanoGPT): one [vocab, C] matrix is
the token embedding and the LM head, stored once in the state_dict (`wte.weight`). No dropout
(nanoGPT's default for pretraining).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import LaunchError
from ..ops import checks, linear, linear_cross_entropy, mlp
from ..ops.norms import layer_norm_linear, out_proj_residual
from .layer_norm import layer_norm
from .modules import head_dim


@dataclass(frozen=True)
class GPTConfig:
    n_layer: int = 2
    n_head: int = 2
    n_embd: int = 128
    block_size: int = 64      # the context: number of learned positions
    vocab_size: int = 256     # bytes
    eps: float = 1e-5         # LayerNorm's epsilon (GPT-2's)


PRESETS = {
    "tiny": GPTConfig(n_layer=2, n_head=2, n_embd=128, block_size=64),           # 0.4M, for a CPU
    "small": GPTConfig(n_layer=6, n_head=6, n_embd=384, block_size=256),         # 11M, nanoGPT's char model
    "gpt2": GPTConfig(n_layer=12, n_head=12, n_embd=768, block_size=1024),       # GPT-2 124M's body, 86M
}


def _cast(layer: nn.Module, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """A Linear's or LayerNorm's (weight, bias) in the compute dtype."""
    return layer.weight.to(dtype), layer.bias.to(dtype)


class Block(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        c = config.n_embd
        head_dim(c, config.n_head)
        self.n_head = config.n_head
        self.ln_1, self.ln_2 = nn.LayerNorm(c, config.eps), nn.LayerNorm(c, config.eps)
        self.qkv, self.attn_out = nn.Linear(c, 3 * c), nn.Linear(c, c)
        self.fc1, self.fc2 = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Causal multi-head attention of the [B, T, C] projections -> [B, T, C]."""
        b, t, c = q.shape   # sizes spelled out: a view cannot infer a -1 from an empty batch
        q, k, v = (x.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for x in (q, k, v))
        return F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, c)

    def forward(self, x: torch.Tensor, fused: bool) -> torch.Tensor:
        ln_1, qkv, attn_out, ln_2, fc1, fc2 = (_cast(layer, x.dtype) for layer in (
            self.ln_1, self.qkv, self.attn_out, self.ln_2, self.fc1, self.fc2))
        if fused:
            # passthrough: each residual's gradient joins x's inside the norm's backward kernel
            # split: q, k, v's gradients are read in place by the backward GEMMs (no concatenation)
            *qkv_out, x = layer_norm_linear(x, *ln_1, *qkv, eps=self.ln_1.eps, passthrough=True,
                                            split=[x.shape[-1]] * 3)
            x, ss, s = out_proj_residual(self.attend(*qkv_out), attn_out[0], x, attn_out[1], stats="layer")
            h, x = layer_norm(x, *ln_2, eps=self.ln_2.eps, rowsum=s, sumsq=ss, passthrough=True)
            return mlp(h, *fc1, *fc2, activation="gelu", residual=x)
        c = x.shape[-1]
        y = self.attend(*F.linear(F.layer_norm(x, (c,), *ln_1, self.ln_1.eps), *qkv).split(c, -1))
        x = x + F.linear(y, *attn_out)
        h = F.layer_norm(x, (c,), *ln_2, self.ln_2.eps)
        return x + F.linear(F.gelu(F.linear(h, *fc1), approximate="tanh"), *fc2)


class GPT(nn.Module):
    """`model(idx)` -> logits [B, T, vocab]; `model(idx, targets)` -> the mean cross-entropy
    (float32, or float64 for a float64 model).

    idx, targets: [B, T] integer tokens, T <= block_size. `fused` picks CODA (True) or eager
    PyTorch (False) for the same parameters; it can be flipped at any time.
    """

    def __init__(self, config: GPTConfig, fused: bool = True, compute_dtype: torch.dtype | None = None):
        super().__init__()
        self.config, self.fused, self.compute_dtype = config, fused, compute_dtype
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.block_size, config.n_embd)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd, config.eps)
        # GPT-2's initialization: N(0, 0.02), zero biases, the residual branches' last layers
        # scaled down by sqrt(2 n_layer); LayerNorm weights stay 1.
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() == 2:
                last = name.endswith(("attn_out.weight", "fc2.weight"))
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * config.n_layer) if last else 0.02)

    def num_params(self) -> int:
        """Parameters, the position embedding included (the tied head counts once)."""
        return sum(p.numel() for p in self.parameters())

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        self._check_tokens(idx)
        t = idx.shape[1]
        dtype = self.compute_dtype or self.wte.weight.dtype
        x = (self.wte(idx) + self.wpe.weight[:t]).to(dtype)
        for block in self.blocks:
            x = block(x, self.fused)
        ln_f, head = _cast(self.ln_f, dtype), self.wte.weight.to(dtype)
        loss_dtype = torch.promote_types(dtype, torch.float32)   # as autocast: float32 at least
        if self.fused:
            h = layer_norm(x, *ln_f, eps=self.ln_f.eps)
            if targets is None:
                return linear(h, head)
            return linear_cross_entropy(h, head, targets).to(loss_dtype)
        logits = F.linear(F.layer_norm(x, (x.shape[-1],), *ln_f, self.ln_f.eps), head)
        if targets is None:
            return logits
        return F.cross_entropy(logits.flatten(0, 1).to(loss_dtype), targets.flatten().long())

    def _check_tokens(self, idx: object) -> None:
        """A LaunchError naming idx unless it is an int64 or int32 tensor [B, T] (what nn.Embedding
        takes) with 1 <= T <= block_size and, on the CPU (a GPU's check would synchronize every
        step; under torch.compile the values would break the graph), tokens in [0, vocab_size):
        otherwise nn.Embedding's IndexError, or a view's error inside attention, would be the
        message. The targets are linear_cross_entropy's to check."""
        c = self.config
        if not isinstance(idx, torch.Tensor) or idx.dim() != 2 or idx.dtype not in (torch.int64, torch.int32):
            raise LaunchError(f"idx must be an int64 or int32 tensor [B, T] of tokens, got "
                              f"{checks.describe(idx)}")
        if not 1 <= idx.shape[1] <= c.block_size:
            raise LaunchError(f"idx has sequence length {idx.shape[1]}; expected 1 to the context "
                              f"(block_size {c.block_size})")
        if idx.device.type == "cpu" and idx.numel() and not torch.compiler.is_compiling():
            low, high = map(int, torch.aminmax(idx))
            if low < 0 or high >= c.vocab_size:
                raise LaunchError(f"idx holds tokens outside [0, {c.vocab_size}) (vocab_size): they range "
                                  f"from {low} to {high}")

    @torch.no_grad()
    def generate(self, idx: torch.Tensor, new_tokens: int, temperature: float = 1.0, top_k: int | None = None,
                 generator: torch.Generator | None = None) -> torch.Tensor:
        """Append `new_tokens` sampled tokens to idx [B, T] (the last block_size tokens are the context).

        temperature must be positive and top_k (the tokens kept, None for all) at least 1: a zero
        would divide the logits by zero or keep no token, and fail inside torch.multinomial."""
        if (isinstance(temperature, bool) or not isinstance(temperature, (int, float))
                or not 0 < temperature < math.inf):
            raise LaunchError(f"temperature must be a positive number, got {temperature!r}")
        if isinstance(new_tokens, bool) or not isinstance(new_tokens, int) or new_tokens < 0:
            raise LaunchError(f"new_tokens must be an int >= 0, got {new_tokens!r}")
        if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
            raise LaunchError(f"top_k must be None or a positive int, got {top_k!r}")
        for _ in range(new_tokens):
            logits = self(idx[:, -self.config.block_size:])[:, -1].float() / temperature
            if top_k is not None:
                kth = torch.topk(logits, min(top_k, logits.shape[-1])).values[:, -1:]
                logits = logits.masked_fill(logits < kth, -math.inf)
            probs = torch.softmax(logits, dim=-1)
            idx = torch.cat([idx, torch.multinomial(probs, 1, generator=generator)], dim=1)
        return idx
