"""How far 3xTF32 lands from the float32 layer-scale test's bound, emulated on the CPU (fifty-eighth
session; the GPU run is next_a.sh): each operand split into a TF32 part (10-bit mantissa,
truncated or rounded to nearest) and the TF32 part of the rest, the three products exact in
float64, y = x @ w.T against float64, as a fraction of the test's bound, twice eager float32's
error plus eps32 * sqrt(max(m, k)). Prints the worst fraction over 30 seeds at both shapes.

    python benchmarks/results/session58/tf32x3_emulation.py
"""

from __future__ import annotations

import torch

SHAPES = [(96, 80, 64), (37, 50, 24)]   # tests/examples/test_layer_scale.py


def truncated(x: torch.Tensor) -> torch.Tensor:
    return (x.view(torch.int32) & ~((1 << 13) - 1)).view(torch.float32)


def rounded(x: torch.Tensor) -> torch.Tensor:
    return ((x.view(torch.int32) + (1 << 12)) & ~((1 << 13) - 1)).view(torch.float32)


def three_tf32(a: torch.Tensor, b: torch.Tensor, tf32) -> torch.Tensor:
    a_big, b_big = tf32(a), tf32(b)
    a_small, b_small = tf32(a - a_big), tf32(b - b_big)

    def product(p, q):
        return (p.double() @ q.double()).float()

    return product(a_big, b_big) + (product(a_big, b_small) + product(a_small, b_big))


def main() -> None:
    worst = {"truncated": 0.0, "rounded": 0.0}
    for seed in range(30):
        for m, n, k in SHAPES:
            g = torch.Generator().manual_seed(seed)
            x = torch.randn(m, k, dtype=torch.float64, generator=g)
            w = torch.randn(n, k, dtype=torch.float64, generator=g)
            ref = x @ w.T
            scale = ref.abs().max()
            eager = ((x.float() @ w.float().T).double() - ref).abs().max() / scale
            bound = 2 * eager + torch.finfo(torch.float32).eps * max(m, k) ** 0.5
            for name, tf32 in (("truncated", truncated), ("rounded", rounded)):
                got = three_tf32(x.float(), w.float().T.contiguous(), tf32).double()
                got = (got - ref).abs().max() / scale
                worst[name] = max(worst[name], (got / bound).item())
    print({name: round(value, 3) for name, value in worst.items()})


if __name__ == "__main__":
    main()
