"""A trainable fused op of your own: a LayerScale residual branch, forward and backward as CODA programs.

    y = residual + gamma ⊙ (x @ w.T + b)        x [M, K], w [N, K], b and gamma [N], residual [M, N]

(LayerScale, as in CaiT and DINOv2: a learned per-channel scale on a residual branch.) Eager
PyTorch runs the GEMM and then reads and writes the [M, N] tile twice more (the scale, the add),
and its backward reads dy three more times (dy ⊙ gamma, the two column sums). Here:

    forward   one GEMM; its epilogue adds b, scales, adds the residual and saves pre = x @ w.T + b
    backward  one map over dy: dgamma = Σ_rows dy ⊙ pre and db = gamma ⊙ Σ_rows dy (nothing written)
              dx = dy @ (gamma ⊙_row w)           (gamma folded into w's rows: [N, K], small)
              dw = gamma ⊙_row (dy.T @ x)         (one GEMM; gamma is a row operand of its output)

Run it: `python examples/layer_scale.py` (on a CPU the reference backend, or the real Triton
kernels with TRITON_INTERPRET=1; on a GPU the Triton kernels) prints the error of the output and
of every gradient against eager PyTorch in float64, next to eager PyTorch's own at the same
dtype. docs/python-api.md ("A trainable op of your own") walks through it.
"""

import torch

import coda


@coda.epilogue
def layer_scale_forward(acc, bias: coda.col, gamma: coda.col, residual: coda.tile):
    pre = acc + bias
    return {"output": residual + gamma * pre, "pre": pre}


@coda.epilogue
def branch_sums(dy, pre: coda.tile, gamma: coda.col):   # a map over dy: column sums only
    return {"output": dy, "dgamma": coda.col_sum(dy * pre), "dbias": coda.col_sum(dy * gamma)}


@coda.epilogue
def scale_rows(acc, gamma: coda.row):   # (dy.T @ x) [N, K]: its row n scaled by gamma[n]
    return acc * gamma


class LayerScaleFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, bias, gamma, residual):
        outs = layer_scale_forward(x, w.T, bias=bias, gamma=gamma, residual=residual)
        ctx.save_for_backward(x, w, gamma, outs["pre"])
        return outs["output"]

    @staticmethod
    def backward(ctx, dy):
        x, w, gamma, pre = ctx.saved_tensors
        sums = branch_sums.map(dy, pre=pre, gamma=gamma, outputs=["dgamma", "dbias"],
                               dtypes={"dgamma": gamma.dtype, "dbias": gamma.dtype})
        dx = dy @ (gamma[:, None] * w)
        dw = scale_rows(dy.T, x, gamma=gamma)["output"]
        return dx, dw, sums["dbias"], sums["dgamma"], dy


def layer_scale(x, w, bias, gamma, residual):
    """residual + gamma ⊙ (x @ w.T + bias) for x [M, K] (2-D here, to keep the example short)."""
    return LayerScaleFunction.apply(x, w, bias, gamma, residual)


def eager(x, w, bias, gamma, residual):
    return residual + gamma * (x @ w.T + bias)


def errors(fn, dtype: torch.dtype, m: int = 96, n: int = 80, k: int = 64, seed: int = 0) -> list[float]:
    """How far `fn`'s output and gradients (x, w, bias, gamma, residual), computed in `dtype`,
    are from eager PyTorch's in float64: the largest difference relative to the largest value,
    per tensor. On CUDA when there is a GPU."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    generator = torch.Generator().manual_seed(seed)
    shapes = {"x": (m, k), "w": (n, k), "bias": (n,), "gamma": (n,), "residual": (m, n)}
    leaves = {name: torch.randn(shape, dtype=torch.float64, generator=generator)
              for name, shape in shapes.items()}
    dy = torch.randn(m, n, dtype=torch.float64, generator=generator)

    def run(fn, dtype):
        inputs = {name: t.to(device, dtype).detach().requires_grad_() for name, t in leaves.items()}
        y = fn(**inputs)
        y.backward(dy.to(device, dtype))
        return [y.detach()] + [inputs[name].grad for name in shapes]

    want = run(eager, torch.float64)
    return [((got.double() - ref).abs().max() / ref.abs().max()).item()
            for got, ref in zip(run(fn, dtype), want, strict=True)]


if __name__ == "__main__":
    names = ("y", "dx", "dw", "db", "dgamma", "dresidual")
    for dtype in (torch.float32, torch.float16):
        fused, plain = errors(layer_scale, dtype), errors(eager, dtype)
        print(f"{dtype}: relative error against float64 of layer_scale (eager PyTorch in {dtype}):")
        print("  " + ", ".join(f"{name} {f:.1e} ({e:.1e})" for name, f, e in zip(names, fused, plain,
                                                                                strict=True)))
