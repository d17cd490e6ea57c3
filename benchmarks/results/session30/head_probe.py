"""GPT-2's LM head + cross-entropy (16384 × 768 × 50257, bf16, no bias), forward + backward,
with the exponential path (the forward stores exp(ℓ - c): no gradient map) and without it
(`Blocks.exponential` patched to False: the forward stores the logits, a map turns them into
the gradient), timed from CUDA graphs in one process, alternated; each checked against the
same head in float32 eager PyTorch (relative errors of the loss, dx and dw).

    PYTHONPATH=src python benchmarks/results/session30/head_probe.py [--json out.json]
"""

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from kernel_configs import graph_us

from coda.ops import cross_entropy
from coda.ops.cross_entropy import linear_cross_entropy


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=16384)
    parser.add_argument("--vocab", type=int, default=50257)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    torch.manual_seed(0)
    t, h, v = args.tokens, 768, args.vocab
    x = torch.randn(t, h, device="cuda", dtype=torch.bfloat16).requires_grad_()
    w = (torch.randn(v, h, device="cuda") * 0.05).to(torch.bfloat16).requires_grad_()
    target = torch.randint(0, v, (t,), device="cuda")
    target[::50] = -100

    def step():
        loss = linear_cross_entropy(x, w, target, exponential=True)   # opt-in since the 31st session
        return (loss, *torch.autograd.grad(loss, [x, w]))

    def errors(got, want):
        return [((a.float() - b).norm() / b.norm()).item() for a, b in zip(got, want, strict=True)]

    xf, wf = x.detach().float().requires_grad_(), w.detach().float().requires_grad_()
    loss32 = F.cross_entropy(xf @ wf.T, target)
    want = (loss32, *torch.autograd.grad(loss32, [xf, wf]))
    del loss32
    xb, wb = x.detach().requires_grad_(), w.detach().requires_grad_()
    loss16 = F.cross_entropy(xb @ wb.T, target)   # eager at bf16: the tolerance's yardstick
    eager = (loss16, *torch.autograd.grad(loss16, [xb, wb]))
    del loss16
    results = dict(eager_bf16_error=errors(eager, want))
    general = cross_entropy.Blocks.exponential
    for label, exponential in (("exp", True), ("general", False)):
        cross_entropy.Blocks.exponential = general if exponential else (lambda self: False)
        results[f"{label}_error"] = errors(step(), want)
    print("relative errors (loss, dx, dw) against float32:", results, flush=True)
    for _ in range(2):
        for label, exponential in (("exp", True), ("general", False)):
            cross_entropy.Blocks.exponential = general if exponential else (lambda self: False)
            us = graph_us(step, args.reps)
            results.setdefault(f"{label}_us", []).append(round(us, 1))
            print(f"{label:8s} {us:8.1f} us fwd+bwd", flush=True)
    cross_entropy.Blocks.exponential = general
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
