"""One step's LM-head gradients in bf16, each path against float64 and against the others: does
the exponential path's gradient sit nearer the float32 head's than eager bf16's does (which the
training curves suggest, docs/ops.md "The exponential path")? On the CPU (CODA's reference
backend, which rounds where the kernels do), a GPT-2-like head: 1024 rows, hidden 768, vocabulary
50257, logits of standard deviation about 4, targets among the first 256 classes (the KJV bytes).

    PYTHONPATH=src python benchmarks/results/session33/head_numerics.py     (about 30 s)

Prints per path the relative error of dx and dw against float64, dw's on the vocabulary rows no
target uses, and the share of dw's elements whose sign differs from float64's (Adam's first steps
move each weight by about lr·sign(g)); then the distance between paths, relative to float64's.
"""

import os

os.environ["TRITON_INTERPRET"] = "0"   # the reference backend: the interpreter has no bf16

import torch
import torch.nn.functional as F

from coda.ops import linear_cross_entropy

ROWS, HIDDEN, VOCAB, USED = 1024, 768, 50257, 256


def grads(loss_fn, x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x, w = x.clone().requires_grad_(), w.clone().requires_grad_()
    loss_fn(x, w).backward()
    return x.grad.double(), w.grad.double()


def relative(a: torch.Tensor, b: torch.Tensor, scale: torch.Tensor) -> float:
    return ((a - b).norm() / scale.norm()).item()


def main() -> None:
    torch.manual_seed(0)
    x = torch.randn(ROWS, HIDDEN).to(torch.bfloat16)
    w = (torch.randn(VOCAB, HIDDEN) * 0.16).to(torch.bfloat16)
    target = torch.randint(0, USED, (ROWS,))
    exact = grads(lambda x, w: F.cross_entropy(x @ w.T, target), x.double(), w.double())
    runs = {"eager bf16": grads(lambda x, w: F.cross_entropy((x @ w.T).float(), target), x, w),
            "float32 head": grads(lambda x, w: F.cross_entropy(x.float() @ w.float().T, target), x, w),
            "coda general": grads(lambda x, w: linear_cross_entropy(x, w, target, exponential=False), x, w),
            "coda exponential": grads(lambda x, w: linear_cross_entropy(x, w, target), x, w)}
    unused = torch.ones(VOCAB, dtype=torch.bool)
    unused[target] = False
    for name, (dx, dw) in runs.items():
        flips = (torch.sign(dw) != torch.sign(exact[1])).double()
        errors = (relative(dx, exact[0], exact[0]), relative(dw, exact[1], exact[1]),
                  relative(dw[unused], exact[1][unused], exact[1][unused]))
        print(f"{name:17s} dx {errors[0]:.2e}  dw {errors[1]:.2e}  dw unused rows {errors[2]:.2e}"
              f"  sign flips: used rows {flips[~unused].mean():.2e}, unused {flips[unused].mean():.2e}")
    for a, b in (("coda exponential", "coda general"), ("coda exponential", "eager bf16"),
                 ("float32 head", "eager bf16"), ("coda exponential", "float32 head")):
        print(f"{a} - {b}: dx {relative(runs[a][0], runs[b][0], exact[0]):.2e}, "
              f"dw {relative(runs[a][1], runs[b][1], exact[1]):.2e}")


if __name__ == "__main__":
    main()
