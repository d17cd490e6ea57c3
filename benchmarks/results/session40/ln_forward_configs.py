"""LayerNorm's one-pass forward (coda.nn.layer_norm_forward) at 16384 x 768: call 7 found GPT-2's
out projection + ln_2 9.7 µs slower with it than with the producer's sums and LAYER_NORM's map.
Times the kernel for a grid of (ROWS, warps, programs per SM, STAGES) against the maps without
given sums (LN_STATS + its finishing kernel + LAYER_NORM) and with them (LAYER_NORM alone), each
from a CUDA graph of 10 launches, rounds in alternating order.
Run: python benchmarks/results/session40/ln_forward_configs.py"""

import itertools
import statistics

import torch
import triton

from coda.codegen.kernel import launch_cached
from coda.nn import layer_norm_forward
from coda.nn.layer_norm import LAYER_NORM
from coda.ops.norms import LN_STATS

M, N = 16384, 768


def main() -> None:
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(M, N, generator=gen, device="cuda").to(torch.bfloat16)
    g, beta = (torch.randn(N, generator=gen, device="cuda").to(torch.bfloat16) for _ in range(2))
    y = torch.empty_like(x)
    s, ss = (torch.empty(M, device="cuda") for _ in range(2))
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    row = dict(shift=x[:, 0], inv_n=1.0 / N, eps=1e-5)
    sums = LN_STATS.map(x, shift=x[:, 0], outputs=["s", "ss"])
    def maps():
        fresh = LN_STATS.map(x, shift=x[:, 0], outputs=["s", "ss"])
        return LAYER_NORM.map(x, **row, s=fresh["s"], ss=fresh["ss"], g=g, beta=beta)

    cases = {"maps, no sums": maps,
             "LAYER_NORM map, given sums": lambda: LAYER_NORM.map(x, **row, s=sums["s"], ss=sums["ss"], g=g,
                                                                  beta=beta),
             "one pass, launch()": lambda: layer_norm_forward.launch(x, g, beta, 1e-5)}
    for rows, warps, per_sm, stages in itertools.product((1, 2, 4, 8), (1, 2, 4, 8), (1, 2, 4, 8), (1, 2)):
        if rows * warps > 32:
            continue
        cases[(rows, warps, per_sm, stages)] = (
            lambda rows=rows, warps=warps, per_sm=per_sm, stages=stages: launch_cached(
                layer_norm_forward.layer_norm_forward, (min(triton.cdiv(M, rows), per_sm * sms),),
                [x, y, g, beta, s, ss, M, N, x.stride(0), y.stride(0), 1.0 / N, 1e-5],
                dict(ROWS=rows, BLOCK_N=1024, STAGES=stages, num_warps=warps), x.device))
    graphs = {}
    for name, fn in cases.items():
        for _ in range(2):
            fn()
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(10):
                fn()
        graphs[name] = graph
    times = {name: [] for name in graphs}
    names = list(graphs)
    for r in range(4):
        for name in (names if r % 2 == 0 else names[::-1]):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graphs[name].replay()
            end.record()
            end.synchronize()
            times[name].append(start.elapsed_time(end) * 100)
    med = {name: statistics.median(t) for name, t in times.items()}
    for name in list(cases)[:3]:
        print(f"{name}: {med[name]:.1f} µs", flush=True)
    ranked = sorted((v, k) for k, v in med.items() if isinstance(k, tuple))
    print("one pass, fastest (ROWS, warps, programs per SM, STAGES): "
          + "; ".join(f"{k} {v:.1f}" for v, k in ranked[:10]), flush=True)


if __name__ == "__main__":
    main()
