"""Thirty-seventh session, call 7: coda.nn.layer_norm's backward on the GPU launched repeatedly
at one shape (the later launches go through the cached direct launcher) and at a misaligned view
(another specialization), each against float32 autograd of torch's layer_norm on fresh inputs."""

import torch

from coda.nn import layer_norm

torch.manual_seed(0)
for trial in range(4):
    base = torch.randn(4097 * 768 + 8, device="cuda", dtype=torch.bfloat16)
    start = 0 if trial < 3 else 1   # the last: a view 2 bytes off 16-byte alignment
    x = base[start:start + 4096 * 768].view(4096, 768).requires_grad_()
    g = (1 + 0.3 * torch.randn(768, device="cuda")).to(torch.bfloat16).requires_grad_()
    beta = torch.randn(768, device="cuda", dtype=torch.bfloat16).requires_grad_()
    dy = torch.randn(4096, 768, device="cuda", dtype=torch.bfloat16)
    layer_norm(x, g, beta).backward(dy)
    got = [t.grad.float() for t in (x, g, beta)]
    xr, gr, br = (t.detach().float().requires_grad_() for t in (x, g, beta))
    torch.nn.functional.layer_norm(xr, (768,), gr, br, 1e-5).backward(dy.float())
    errors = [((a - b.grad).norm() / b.grad.norm()).item() for a, b in zip(got, (xr, gr, br), strict=True)]
    print(f"trial {trial} (offset {start}): relative errors dx/dg/dbeta {errors}")
    assert max(errors) < 1e-2, errors
