"""Does the layout of q, k, v and dO change cuDNN's attention time at GPT-2's shape?

CODA's GPT-2 step profiled cuDNN's flash backward at 3,023 µs a step against 2,738 in
torch.compile's (the same kernel, 12 launches; thirty-ninth session, call 2). CODA passes q, k
and v as column blocks of the c_attn GEMM's [B·T, 3·768] output (strides T·2304, 64, 2304, 1),
as HF's eager code does. This times cuDNN's forward and backward kernels for several layouts,
interleaved in rounds (profiler, kernel time summed by name), and prints the layouts cuDNN
returns its gradients in. Run: python benchmarks/results/session40/sdpa_layout.py"""

import json
import os
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

B, T, H, D = 16, 1024, 12, 64
W = H * D
dev, dt = "cuda", torch.bfloat16


def heads(x: torch.Tensor) -> torch.Tensor:
    """[B, T, H·D] (any row stride) -> [B, H, T, D] view."""
    return x.unflatten(-1, (H, D)).transpose(1, 2)


def qkv(layout: str) -> list[torch.Tensor]:
    if layout == "split (CODA, HF eager)":
        return [heads(t) for t in torch.randn(B, T, 3 * W, device=dev, dtype=dt).split(W, dim=-1)]
    if layout == "separate [B,T,768]":
        return [heads(torch.randn(B, T, W, device=dev, dtype=dt)) for _ in range(3)]
    if layout == "contiguous [B,H,T,D]":
        return [torch.randn(B, H, T, D, device=dev, dtype=dt) for _ in range(3)]
    raise ValueError(layout)


def grad_out(layout: str) -> torch.Tensor:
    if layout == "[B,T,768]":
        return heads(torch.randn(B, T, W, device=dev, dtype=dt))
    return torch.randn(B, H, T, D, device=dev, dtype=dt)


def case(qkv_layout: str, do_layout: str):
    q, k, v = (t.requires_grad_() for t in qkv(qkv_layout))
    do = grad_out(do_layout)

    def step():
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return torch.autograd.grad(out, (q, k, v), do)
    return step


def kernel_times(step, iters: int) -> dict:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            step()
        torch.cuda.synchronize()
    sums = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            name = e.name[:60]
            sums[name] = sums.get(name, 0.0) + e.device_time / iters
    return sums


def main() -> None:
    cases = [(a, b) for a in ("split (CODA, HF eager)", "separate [B,T,768]", "contiguous [B,H,T,D]")
             for b in ("[B,T,768]", "[B,H,T,D]")]
    steps = {c: case(*c) for c in cases}
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        for c, s in steps.items():
            grads = s()
            print(c, "grad strides:", [tuple(g.stride()) for g in grads], flush=True)
        for _ in range(3):
            for s in steps.values():
                s()
        torch.cuda.synchronize()
        rounds = {c: [] for c in cases}
        for r in range(5):
            for c in (cases if r % 2 == 0 else cases[::-1]):
                rounds[c].append(kernel_times(steps[c], 20))
    result = {}
    for c in cases:
        names = rounds[c][0].keys()
        med = {n: statistics.median(rd.get(n, 0.0) for rd in rounds[c]) for n in names}
        total = statistics.median(sum(rd.values()) for rd in rounds[c])
        result[" | ".join(c)] = {"total_us": total, "kernels_us": med}
        print(f"{' | '.join(c):55s} total {total:8.1f} µs   " +
              "  ".join(f"{n[:40]} {t:.1f}" for n, t in sorted(med.items(), key=lambda x: -x[1])[:4]),
              flush=True)
    out = os.environ.get("OUT", "/tmp")
    with open(os.path.join(out, "sdpa_layout.json"), "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                   "shape": [B, T, H, D], "cases": result}, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
