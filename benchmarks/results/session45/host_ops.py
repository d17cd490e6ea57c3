"""Host time of one fwd+bwd of each micro-suite op (benchmarks/micro.py's calls) on a CPU, with
CODA's Triton path and every kernel a no-op (host_cpu.py's harness), at 512 tokens and GPT-2's
widths. Run: python benchmarks/results/session45/host_ops.py [op] [--profile]"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import host_cpu  # installs the no-op kernels
import torch

from coda import ops

T, H, F_, V = 512, 768, 3072, 50257


def p(*shape, scale=0.02):
    return (torch.randn(*shape) * scale).to(torch.bfloat16).requires_grad_()


def cases():
    x, g, beta = p(T, H, scale=1.0), p(H, scale=1.0), p(H, scale=0.1)
    w3, b3 = p(3 * H, H), p(3 * H, scale=0.1)
    w1, b1, w2, b2 = p(F_, H), p(F_, scale=0.1), p(H, F_), p(H, scale=0.1)
    wo, res = p(H, H), p(T, H, scale=1.0)
    wv = p(V, H)
    target = torch.randint(V, (T,))
    return {
        "linear_gelu": (lambda: ops.linear(x, w1, b1, activation="gelu"), [x, w1, b1]),
        "rms_norm_linear": (lambda: ops.rms_norm_linear(x, g, w3, 1e-6), [x, g, w3]),
        "layer_norm_linear": (lambda: ops.layer_norm_linear(x, g, beta, w3, b3, 1e-5), [x, g, beta, w3, b3]),
        "out_proj_residual": (lambda: ops.out_proj_residual(x, wo, res, stats="rms"), [x, wo, res]),
        "mlp": (lambda: ops.mlp(x, w1, b1, w2, b2), [x, w1, b1, w2, b2]),
        "lm_head_cross_entropy": (lambda: ops.linear_cross_entropy(x, wv, target), [x, wv]),
    }


def fwd_bwd(fn, grads_of):
    upstream = []

    def step():
        for t in grads_of:
            t.grad = None
        out = fn()
        outs = [o for o in (out if isinstance(out, tuple) else (out,)) if o.requires_grad]
        if not upstream:
            upstream.extend(torch.ones_like(o) for o in outs)
        torch.autograd.backward(outs, upstream)
    return step


def main():
    wanted = [a for a in sys.argv[1:] if not a.startswith("--")]
    for name, (fn, grads_of) in cases().items():
        if wanted and name not in wanted:
            continue
        step = fwd_bwd(fn, grads_of)
        median, _ = host_cpu.host_seconds(step, 20)
        print(f"{name}: {1e6 * median:.0f} us a fwd+bwd (median of 7 x 20)", flush=True)
        if "--profile" in sys.argv:
            host_cpu.profile(step, 20, keys=("tottime",))


if __name__ == "__main__":
    main()
