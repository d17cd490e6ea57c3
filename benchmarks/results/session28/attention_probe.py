"""GPT-2's attention (16 x 12 heads x 1024 x 64, causal, bf16) forward + backward in each of
PyTorch's SDPA backends, q/k/v laid out as the patched block makes them ([B, S, H, D] views
transposed to [B, H, S, D]); µs from CUDA graphs of 10 calls."""
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, "benchmarks")
from kernel_configs import graph_us

b, h, s, d = 16, 12, 1024, 64
qkv = [torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3)]
dout = torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16)


def step():
    q, k, v = (t.transpose(1, 2) for t in qkv)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.autograd.backward(out, dout)


for backend in (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION):
    with sdpa_kernel(backend):
        try:
            us = graph_us(step, 10)
            print(f"{backend.name}: {us:.1f} us fwd+bwd", flush=True)
        except Exception as exc:   # a backend that does not take these inputs
            print(f"{backend.name}: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
