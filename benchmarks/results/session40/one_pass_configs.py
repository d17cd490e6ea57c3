"""LayerNorm's one-pass backward as layer_norm_linear's backward runs it at GPT-2's ln_1 (16384 x
768, dres, dg and dβ, and the norm's output xn stored): 31.9 µs in call 5's profile where the map
it replaced (dx and xhat from the GEMM's row sums, the same bytes) took 23.3. Times
`layer_norm_grad.launch(..., choice=(ROWS, warps, programs, STAGES))` for a grid of choices,
each replayed from a CUDA graph, rounds in alternating order; with and without xn.
Run: python benchmarks/results/session40/one_pass_configs.py"""

import itertools
import statistics

import torch

from coda.nn import layer_norm_grad

M, N = 16384, 768


def main() -> None:
    gen = torch.Generator(device="cuda").manual_seed(0)
    x, dy, dres = (torch.randn(M, N, generator=gen, device="cuda").to(torch.bfloat16) for _ in range(3))
    g, beta = (torch.randn(N, generator=gen, device="cuda").to(torch.bfloat16) for _ in range(2))
    d = x.float() - x[:, 0:1].float()
    row = dict(shift=x[:, 0], s=d.sum(1), ss=(d * d).sum(1), inv_n=1.0 / N, eps=1e-5)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    choices = [None] + [(rows, warps, per_sm * sms, stages) for rows, warps, per_sm, stages in
                        itertools.product((1, 2, 4), (2, 4, 8), (2, 4, 8), (1, 2, 3))
                        if rows * warps <= 16]
    graphs = {}
    for choice, save in itertools.product(choices, (True, False)):
        def launch(choice=choice, save=save):
            layer_norm_grad.launch(dy, x, g, **row, dres=dres, need_dx=True,
                                   param_dtypes=(torch.bfloat16, torch.bfloat16), choice=choice,
                                   beta=beta if save else None)
        try:
            for _ in range(2):
                launch()
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for _ in range(10):
                    launch()
            graphs[(choice, save)] = graph
        except Exception as error:   # a choice that does not compile
            print(choice, save, "failed:", str(error)[:80])
    times = {key: [] for key in graphs}
    keys = list(graphs)
    for r in range(4):
        for key in (keys if r % 2 == 0 else keys[::-1]):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graphs[key].replay()
            end.record()
            end.synchronize()
            times[key].append(start.elapsed_time(end) * 100)   # µs a launch (10 a replay)
    med = {key: statistics.median(t) for key, t in times.items()}
    for save in (True, False):
        ranked = sorted((v, k[0]) for k, v in med.items() if k[1] == save)
        default = med.get((None, save))
        print(f"xn stored={save}: config() {default:.1f} µs; fastest: " +
              "; ".join(f"{c} {v:.1f}" for v, c in ranked[:8]), flush=True)


if __name__ == "__main__":
    main()
