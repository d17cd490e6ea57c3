"""Two probes of LLaMA-492M's layer (bf16), µs per call from CUDA graphs of 20 calls, medians of
5 replays, each way's results compared with the other's:

- the q/k/v stack, forward and backward (its gradients made dense), by the cat of permuted views
  (the old `_qkv_rows`, what Inductor still traces) and by `StackedRows`' row gathers;
- the SwiGLU gradient (dh = dy @ w_down; dpre = pack(dg, du) * rstd, dr = row_sum(...)) fused
  in dh's GEMM as training runs it, against dh from the plain GEMM (CODA's, cuBLAS's) and the
  same epilogue as a map over dh.
"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))   # benchmarks/
from kernel_configs import graph_us  # also puts src/ on the path

from coda.integrations.hf import StackedRows
from coda.integrations.hf import _stacked_views as by_cat
from coda.ops.common import PLAIN
from coda.ops.gated_mlp import grad_program


def qkv_stack(d=64, hidden=2048):
    parts = [torch.randn(n, hidden, device="cuda", dtype=torch.bfloat16, requires_grad=True)
             for n in (2048, 512, 512)]
    grad = torch.randn(3072, hidden, device="cuda", dtype=torch.bfloat16)
    a, b = by_cat(parts, 2, d), StackedRows.apply(2, d, *parts)
    ga, gb = torch.autograd.grad(a, parts, grad), torch.autograd.grad(b, parts, grad)
    print("q/k/v stack, equal:", torch.equal(a, b), all(map(torch.equal, ga, gb)))
    for name, fn, args in (("cat of views", by_cat, (parts, 2, d)),
                           ("StackedRows", StackedRows.apply, (2, d, *parts))):
        def step(fn=fn, args=args):   # the gradients made dense, as AccumulateGrad keeps them
            return [g.contiguous() for g in torch.autograd.grad(fn(*args), parts, grad)]
        print(f"  {name}: forward {graph_us(lambda fn=fn, args=args: fn(*args), 20):.1f} us, "
              f"forward + backward {graph_us(step, 20):.1f} us")


def swiglu_gradient(m=16384, f=5632, hidden=2048):
    def rand(*shape):
        return torch.randn(*shape, device="cuda", dtype=torch.bfloat16)
    dy, w_down, g, u = rand(m, hidden), rand(hidden, f) / hidden ** 0.5, rand(m, f), rand(m, f)
    row = dict(ss=torch.rand(m, device="cuda") * hidden + 1, inv_n=1.0 / hidden, eps=1e-6)
    prog = grad_program("silu", "sumsq", True)
    ways = {"fused": lambda: prog(dy, w_down, g=g, u=u, **row),
            "CODA plain + map": lambda: prog.map(PLAIN(dy, w_down)["output"], g=g, u=u, **row),
            "cuBLAS + map": lambda: prog.map(dy @ w_down, g=g, u=u, **row)}
    outs = {name: way() for name, way in ways.items()}
    ref = outs["fused"]
    for name, out in outs.items():
        err = {k: ((out[k].float() - ref[k].float()).norm() / ref[k].float().norm()).item() for k in ref}
        print(f"  {name}: {graph_us(ways[name], 20):.1f} us, relative difference from fused {err}")
    print(f"  CODA plain GEMM alone {graph_us(lambda: PLAIN(dy, w_down), 20):.1f} us, cuBLAS "
          f"{graph_us(lambda: dy @ w_down, 20):.1f} us")


print(torch.cuda.get_device_name())
qkv_stack()
print("SwiGLU gradient, 16384 x 5632 x 2048:")
swiglu_gradient()
