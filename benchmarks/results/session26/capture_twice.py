"""Twenty-sixth session: does a CODA op captured in two CUDA graphs (two sets of tensors, one
process) replay from the first graph after the second was captured? GPT-2's patched step
did not (an illegal memory access); this runs one op at a time, each in its own process
(an illegal address ends the CUDA context).

    PYTHONPATH=$PWD/src python benchmarks/results/session26/capture_twice.py        # every op
    PYTHONPATH=$PWD/src python benchmarks/results/session26/capture_twice.py linear  # one
"""

from __future__ import annotations

import subprocess
import sys

import torch

M, H, V = 4096, 768, 50257


def step_of(op: str):
    """A fresh set of parameters and inputs, and a function that runs op's forward and backward
    on them (GPT-2's shapes and calls, coda/integrations/hf.py)."""
    from coda import nn, ops

    def p(*shape, scale=0.02):
        return (torch.randn(*shape, device="cuda", dtype=torch.bfloat16) * scale).requires_grad_()

    x, res = p(M, H, scale=1.0), p(M, H, scale=1.0)
    g, b = p(H, scale=1.0), p(H)
    w_attn, b_attn, w_proj = p(H, 3 * H), p(3 * H), p(H, H)
    w_fc, b_fc, w_fc2 = p(H, 4 * H), p(4 * H), p(4 * H, H)
    wte = p(V, H)
    target = torch.randint(V, (M,), device="cuda")
    calls = {
        "layer_norm_linear": lambda: sum(t.float().sum() for t in ops.layer_norm_linear(
            x, g, b, w_attn.T, b_attn, split=[H, H, H])),
        "out_proj_residual": lambda: sum(t.float().sum() for t in ops.out_proj_residual(
            x, w_proj.T, res, b, stats="layer")[:1]),
        "mlp": lambda: ops.mlp(x, w_fc.T, b_fc, w_fc2.T, b, "gelu", residual=res).float().sum(),
        "layer_norm": lambda: nn.layer_norm(x, g, b).float().sum(),
        "linear_cross_entropy": lambda: ops.linear_cross_entropy(x, wte, target),
    }
    params = [x, res, g, b, w_attn, b_attn, w_proj, w_fc, b_fc, w_fc2, wte]

    def step():
        for t in params:
            t.grad = None
        calls[op]().backward()
    return step


def run(op: str) -> None:
    graphs = []
    for _ in range(2):
        step = step_of(op)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            step()
        graphs.append(graph)
    for i in (0, 1, 0):
        graphs[i].replay()
        torch.cuda.synchronize()
    print(f"{op}: both graphs replayed", flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 1:
        run(sys.argv[1])
    else:
        for op in ("layer_norm_linear", "out_proj_residual", "mlp", "layer_norm", "linear_cross_entropy"):
            done = subprocess.run([sys.executable, __file__, op], capture_output=True, text=True, timeout=120)
            last = (done.stdout + done.stderr).strip().splitlines()
            print(f"{op}: rc={done.returncode}", last[-1][:200] if last else "", flush=True)
