"""GPU experiment of the eighth session: linear_cross_entropy(low_memory=True) fwd+bwd at GPT-2's
shape with its GEMM outputs stored by TMA (the default) and by pointer stores. Run from the
repository root with `PYTHONPATH=src python benchmarks/results/session8/lowmem.py`; it wrote
run5/lowmem.log."""
import time

import torch
import triton.testing as tt

from coda.codegen import kernel as km
from coda.ops import cross_entropy as ce

T, H, V = 8192, 768, 50257
torch.manual_seed(0)
x = torch.randn(T, H, device="cuda").to(torch.bfloat16).requires_grad_()
w = (torch.randn(V, H, device="cuda") / H**0.5).to(torch.bfloat16).requires_grad_()
t = torch.randint(0, V, (T,), device="cuda")
def run():
    ce.linear_cross_entropy(x, w, t, low_memory=True).backward()
orig = km._tma_ok
for label in ("tma_out", "pointer_out"):
    if label == "pointer_out":
        km._tma_ok = lambda a, row_major=False: False if row_major else orig(a)
        ce.forward_program.cache_clear()   # new programs: new kernels, no cached plans
        ce.grad_program.cache_clear()
    t0 = time.time()
    run()
    torch.cuda.synchronize()
    ms = tt.do_bench(run, warmup=3, rep=20, return_mode="median")
    print(f"low_memory 8192x768x50257 {label}: {ms:.2f} ms (first call {time.time() - t0:.0f} s)",
          flush=True)
