"""GPT-2's ln_1 + q/k/v projection, forward and backward, two ways, timed from CUDA graphs (µs):

  folded    `coda.ops.layer_norm_linear(..., passthrough=True, split=[C] * 3)`, what the HF patch
            runs: the norm folded into the GEMM (fold + row sums of W', the ln_linear GEMM;
            backward the ln_dxhat GEMM, the ln_dx map, the bias column sum, the ln_dw GEMM)
  separate  the norm as `coda.nn.layer_norm`'s maps and the projection as plain CODA GEMMs, the
            q/k/v gradients read in place (a Concat) as `split=` does: the layer_norm map, the
            bias GEMM; backward dxn = dy W (plain), the norm's gradient sums and dx maps, the bias
            column sum, dW = dy.T xn (plain, into the Conv1D weight's layout)

Both are handed the row sums the previous block's fc2 formed (carried sums) and the residual's
gradient (passthrough). Each is checked against the other (dx, dW, db, dg, dbeta).

    PYTHONPATH=src python benchmarks/results/session30/ln_split_probe.py [--tokens 16384]
"""

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from kernel_configs import graph_us

from coda import Concat, ops
from coda.nn.layer_norm import LAYER_NORM, LN_GRAD_DX, LN_GRAD_SUMS
from coda.ops.common import PLAIN, column_sum, weight_grad_out
from coda.ops.linear import forward_program
from coda.ops.norms import row_shift


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=16384)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    torch.manual_seed(0)
    gpu = torch.cuda.is_available()   # on a CPU (TRITON_INTERPRET=1) only the agreement, in float32
    t, c = args.tokens, 768
    dt, dev = (torch.bfloat16, "cuda") if gpu else (torch.float32, "cpu")
    x = torch.randn(t, c, device=dev, dtype=dt)
    s, ss = x.float().sum(1), x.float().square().sum(1)
    g = (1 + 0.1 * torch.randn(c, device=dev)).to(dt).requires_grad_()
    beta = (0.1 * torch.randn(c, device=dev)).to(dt).requires_grad_()
    weight = (0.02 * torch.randn(c, 3 * c, device=dev)).to(dt).requires_grad_()   # Conv1D [in, out]
    bias = (0.02 * torch.randn(3 * c, device=dev)).to(dt).requires_grad_()
    grads = [torch.randn(t, c, device=dev, dtype=dt) for _ in range(4)]   # q, k, v, residual
    xr = x.clone().requires_grad_()

    def folded():
        *qkv, res = ops.layer_norm_linear(xr, g, beta, weight.T, bias=bias, rowsum=s, sumsq=ss,
                                          passthrough=True, split=[c] * 3)
        dx, dg, dbeta, dw, db = torch.autograd.grad([*qkv, res], [xr, g, beta, weight, bias], grads)
        return dict(dx=dx, dg=dg, dbeta=dbeta, dw=dw, db=db)

    w = weight.detach().T
    row = dict(shift=row_shift(x, False), s=s, ss=ss, inv_n=1.0 / c, eps=1e-5)
    linear_bias = forward_program(None, True, False, False, False)

    def separate():
        xn = LAYER_NORM.map(x, **row, g=g.detach(), beta=beta.detach())["output"]
        y = linear_bias(xn, w.T, bias=bias.detach())["output"]
        del y   # attention would read q, k and v; their gradients are `grads`
        dy = Concat(tuple(grads[:3]), 1)
        dxn = PLAIN(dy, w)["output"]
        sums = LN_GRAD_SUMS.map(dxn, **row, g=g.detach(), xin=x, outputs=["a", "b", "dg", "dbeta"],
                                dtypes={"dg": dt, "dbeta": dt})
        dx = LN_GRAD_DX[True].map(dxn, **row, g=g.detach(), xin=x, a=sums["a"], b=sums["b"],
                                  dres=grads[3])["output"]
        dw = PLAIN(dy.T, xn, out=weight_grad_out(w))["output"]
        db = column_sum(dy, dt)
        return dict(dx=dx, dg=sums["dg"], dbeta=sums["dbeta"], dw=dw.T, db=db)

    results = {}
    first = folded()
    second = separate()
    for name in first:
        a, b = first[name].float(), second[name].float()
        err = ((a - b).norm() / a.norm()).item()
        results[f"agree_{name}"] = err
        print(f"{name:6s} relative difference {err:.2e}")
    for name, fn in (("folded", folded), ("separate", separate), ("folded", folded),
                     ("separate", separate)) if gpu else ():
        us = graph_us(fn, args.reps)
        results.setdefault(name, []).append(us)
        print(f"{name:9s} {us:8.1f} us fwd+bwd")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
