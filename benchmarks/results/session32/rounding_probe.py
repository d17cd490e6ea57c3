"""Whose rounding does each LM-head path share? dx and dw of linear_cross_entropy in float16 on
the CPU (Triton interpreter), eager PyTorch (float16 logits upcast to float32, as HF does) and
float64, for logits of growing size (`scale`: their standard deviation). Prints, per path, the
relative distance of its gradients to float64's (accuracy) and to eager's (how closely it would
follow eager's training curve: a path that rounds the logits as eager does makes eager's errors).

    TRITON_INTERPRET=1 PYTHONPATH=src python benchmarks/results/session32/rounding_probe.py
    PYTHONPATH=src python benchmarks/results/session32/rounding_probe.py --dtype bfloat16

bfloat16 runs on the reference backend (without TRITON_INTERPRET: the interpreter's bf16 is
broken), which computes as the kernels do (float32, results rounded to bf16): the only way to
see the exponential path's numerics off the GPU, since a float16 head takes the general path.
"""

import argparse

import torch
import torch.nn.functional as F

from coda.ops import linear_cross_entropy


def grads(loss_fn, x, w, target):
    x, w = (t.detach().clone().requires_grad_() for t in (x, w))
    loss_fn(x, w, target).backward()
    return x.grad.double(), w.grad.double()


def eager(x, w, target):
    return F.cross_entropy((x @ w.T).float(), target)


def distance(a, b):
    return max(((p - q).norm() / q.norm()).item() for p, q in zip(a, b, strict=True))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dtype", default="float16", choices=["float16", "bfloat16"])
    dtype = getattr(torch, parser.parse_args().dtype)
    g = torch.Generator().manual_seed(0)
    rows, hidden, vocab = 256, 64, 2048
    x = torch.randn(rows, hidden, generator=g, dtype=torch.float64)
    w0 = torch.randn(vocab, hidden, generator=g, dtype=torch.float64) / hidden**0.5
    target = torch.randint(0, 256, (rows,), generator=g)
    print(f"{'scale':>5} {'path':8} {'to float64':>10} {'to eager':>9}")
    for scale in (1.0, 4.0, 16.0):
        w = w0 * scale
        exact = grads(eager, x, w, target)
        half = [t.to(dtype) for t in (x, w)]
        near = grads(eager, *half, target)
        print(f"{scale:5.0f} {'eager':8} {distance(near, exact):10.2e} {0:9.2e}")
        for name, options in (("general", {}), ("exp", {"exponential": True})):
            got = grads(lambda x, w, t, o=options: linear_cross_entropy(x, w, t, **o), *half, target)
            print(f"{scale:5.0f} {name:8} {distance(got, exact):10.2e} {distance(got, near):9.2e}")


if __name__ == "__main__":
    main()
