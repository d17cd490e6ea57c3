"""GPT-2's out projection + ln_2 at 16384 x 768, fwd + bwd from CUDA graphs, two ways: the out
projection's epilogue sums its rows for the norm (`stats="layer"`, then LAYER_NORM's map), or it
sums nothing and the norm's one-pass forward (coda.nn.layer_norm_forward) does; and the one-pass
way's errors against float64 beside eager bf16's. Run: python benchmarks/results/session40/ln2_probe.py"""

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from coda.nn import layer_norm
from coda.ops import out_proj_residual

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ln_linear_probe import graphed, time_graphs

M, C = 16384, 768


def tensors(dtype):
    """y (attention's output), w, x (the residual), b, g, beta: leaves of `dtype`."""
    gen = torch.Generator(device="cuda").manual_seed(0)

    def rand(*shape, scale=1.0, shift=0.0):
        return (torch.randn(*shape, generator=gen, device="cuda") * scale + shift).to(dtype).requires_grad_()
    return [rand(M, C), rand(C, C, scale=C ** -0.5), rand(M, C), rand(C, scale=0.1),
            rand(C, scale=0.1, shift=1.0), rand(C, scale=0.1)]


def block(way: str, y, w, x, b, g, beta):
    if way == "eager":
        h = x + F.linear(y, w, b)
        return F.layer_norm(h, (C,), g, beta, 1e-5) + h
    if way == "producer sums":
        h, ss, s = out_proj_residual(y, w, x, bias=b, stats="layer")
        out, h = layer_norm(h, g, beta, 1e-5, rowsum=s, sumsq=ss, passthrough=True)
    else:
        h = out_proj_residual(y, w, x, bias=b, stats=None)
        out, h = layer_norm(h, g, beta, 1e-5, passthrough=True)
    return out + h


def main() -> None:
    upstream = torch.randn(M, C, device="cuda", generator=torch.Generator(device="cuda").manual_seed(1))
    exact_in = [t.detach().double().requires_grad_() for t in tensors(torch.bfloat16)]
    out = block("eager", *exact_in)
    exact = [out.detach(), *torch.autograd.grad(out, exact_in, upstream.double())]
    for way in ("eager", "producer sums", "one pass"):
        inputs = tensors(torch.bfloat16)
        out = block(way, *inputs)
        got = [out, *torch.autograd.grad(out, inputs, upstream.to(out.dtype))]
        errs = [((a.double() - e).norm() / e.norm()).item() for a, e in zip(got, exact, strict=True)]
        print(f"{way:14s} rel. errors (out, dy, dw, dx, db, dg, dbeta): "
              + ", ".join(f"{v:.2e}" for v in errs), flush=True)
    graphs = {}
    for way in ("producer sums", "one pass"):
        inputs = tensors(torch.bfloat16)

        def fwd_bwd(inputs=inputs, way=way):
            for t in inputs:
                t.grad = None
            block(way, *inputs).backward(upstream.to(torch.bfloat16))
        graphs[way] = graphed(fwd_bwd)
    us = time_graphs(graphs, 10, 20)
    print("out projection + ln_2 fwd+bwd, µs a replay: "
          + ", ".join(f"{k} {1e3 * v:.1f}" for k, v in us.items()), flush=True)


if __name__ == "__main__":
    main()
