"""GPU checks of coda.Concat and `split=`: bf16 at GPT-2's q/k/v shapes, through the Triton Hopper
kernel (its pieces' TMA descriptors).

The GEMMs a q/k/v gradient feeds (dx = (dq | dk | dv) @ w along K, dw = (dq | dk | dv).T @ x
along M), and layer_norm_linear with split=, against float64 of the same bf16 inputs:
CODA's error at most twice eager PyTorch's in bf16 (tests/gpu/accuracy.py). Outputs are poisoned
(NaN) before the kernels write them.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from accuracy import assert_within_eager

import coda
from coda.ops.common import PLAIN
from coda.ops.norms import layer_norm_linear

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

BF16 = torch.bfloat16


def randn(*shape, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(*shape, generator=g, device="cuda").to(BF16)


@pytest.mark.parametrize("tokens, width", [(16384, 768), (4096, 1024)])
def test_concat_gemms_bf16(tokens, width):
    blocks = [randn(tokens, width, seed=i) for i in range(3)]
    w, x = randn(3 * width, width, seed=5) * 0.05, randn(tokens, width, seed=6)
    whole = torch.cat(blocks, 1)
    cat = coda.Concat(blocks, 1)
    for name, a, b, exact_a in (("dx (along K)", cat, w, whole), ("dw (along M)", cat.T, x, whole.T)):
        out = torch.full((a.shape[0], b.shape[1]), float("nan"), device="cuda", dtype=BF16)
        PLAIN(a, b, out=out)
        exact = exact_a.double() @ b.double()
        assert_within_eager(f"concat {name} {tokens}x{width}", out, exact_a @ b, exact)


def test_split_projections_bf16():
    tokens, width = 8192, 768
    x = randn(4, tokens // 4, width, seed=1)
    g, beta = 1 + 0.1 * randn(width, seed=2), 0.1 * randn(width, seed=3)
    w, b = randn(3 * width, width, seed=4) * 0.03, 0.1 * randn(3 * width, seed=5)
    ups = [randn(4, tokens // 4, width, seed=10 + i) for i in range(3)]

    def grads(fn, dtype):
        leaves = [t.detach().to(dtype).requires_grad_() for t in (x, g, beta, w, b)]
        outs = fn(*leaves)
        sum((o.to(dtype) * u.to(dtype)).sum() for o, u in zip(outs, ups, strict=True)).backward()
        return [o.detach() for o in outs] + [t.grad for t in leaves]

    def eager(x, g, beta, w, b):
        return F.linear(F.layer_norm(x, (width,), g, beta, 1e-5), w, b).split(width, -1)

    exact, ref = grads(eager, torch.float64), grads(eager, BF16)
    fused = grads(lambda *t: layer_norm_linear(*t, split=[width] * 3), BF16)
    names = ["q", "k", "v", "dx", "dg", "dbeta", "dw", "db"]
    for name, got, want, truth in zip(names, fused, ref, exact, strict=True):
        assert_within_eager(f"layer_norm_linear split {name}", got, want, truth)
