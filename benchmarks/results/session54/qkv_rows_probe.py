"""LLaMA-492M's q/k/v stack, forward and backward, by the cat of permuted views (the old
`_qkv_rows`, what Inductor still traces) and by `StackedRows`' row gathers: µs per call
from CUDA graphs of 20 calls, medians of 5 replays, and the two results compared."""

import torch

from coda.integrations.hf import StackedRows


def by_cat(parts, rotated, d):
    tail = parts[0].shape[1:]
    heads = [p.view(p.shape[0] // d, 2, d // 2, *tail) for p in parts]
    return torch.cat([h.transpose(1, 2) if i < rotated else h.view(h.shape[0], d // 2, 2, *tail)
                      for i, h in enumerate(heads)]).view(-1, *tail)


def timed(fn, reps=20):
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(reps):
            fn()
    times = []
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1000 / reps)
    return sorted(times)[2]


d, hidden = 64, 2048
parts = [torch.randn(n, hidden, device="cuda", dtype=torch.bfloat16, requires_grad=True)
         for n in (2048, 512, 512)]
grad = torch.randn(3072, hidden, device="cuda", dtype=torch.bfloat16)
a, b = by_cat(parts, 2, d), StackedRows.apply(2, d, *parts)
ga = torch.autograd.grad(a, parts, grad)
gb = torch.autograd.grad(b, parts, grad)
print("equal:", torch.equal(a, b), all(map(torch.equal, ga, gb)))
for name, fn in (("cat of views", by_cat), ("StackedRows", StackedRows.apply)):
    args = (parts, 2, d) if fn is by_cat else (2, d, *parts)

    def step(fn=fn, args=args):
        for p in parts:
            p.grad = None
        fn(*args).backward(grad)   # AccumulateGrad copies a strided gradient
    print(f"{name}: forward {timed(lambda fn=fn, args=args: fn(*args)):.1f} us, "
          f"forward + backward {timed(step):.1f} us")
