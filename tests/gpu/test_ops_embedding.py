"""GPU check of coda.ops.embedding's table gradient: bf16 at GPT-2's size (16384 tokens, a
50257 x 768 table), ids drawn from a Zipf-like law as in real text (the most frequent id about
7% of the tokens). Its relative error against float64 must be at most twice that of PyTorch's
own bf16 backward, and two runs must agree bit for bit. Tied (`tied_embedding`, GPT-2's LM head
sharing the table): the head's gradient for the table arrives with the lookup's, and the
kernel adds the tokens' rows into it."""

from __future__ import annotations

import pytest
import torch
from accuracy import assert_within_eager

from coda.ops import embedding, tied_embedding

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied"])
@pytest.mark.parametrize("padding_idx", [None, 0])
def test_table_gradient_bf16(padding_idx, tied):
    torch.manual_seed(0)
    rows, h, tokens = 50257, 768, 16384
    weights = 1.0 / torch.arange(1, rows + 1, dtype=torch.float64) ** 1.1
    ids = torch.multinomial(weights, tokens, replacement=True).reshape(16, 1024).cuda()
    w = torch.randn(rows, h, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn(16, 1024, h, device="cuda", dtype=torch.bfloat16)
    head_grad = torch.randn(rows, h, device="cuda", dtype=torch.bfloat16) if tied else None
    grads = []
    for _ in range(2):
        w.grad = None
        if tied:   # the table's gradient is modified in place: give each run its own copy
            y, table = tied_embedding(ids, w, padding_idx)
            torch.autograd.backward([y, table], [dy, head_grad.clone()])
        else:
            embedding(ids, w, padding_idx).backward(dy)
        grads.append(w.grad)
    assert torch.equal(grads[0], grads[1])
    w_eager = w.detach().clone().requires_grad_()
    torch.nn.functional.embedding(ids, w_eager, padding_idx).backward(dy)
    w64 = w.detach().double().requires_grad_()
    torch.nn.functional.embedding(ids, w64, padding_idx).backward(dy.double())
    eager, exact = w_eager.grad, w64.grad
    if tied:   # autograd's sum of the two gradients, in bf16 for eager
        eager, exact = eager + head_grad, exact + head_grad.double()
    assert_within_eager("embedding table grad", grads[0], eager, exact)
