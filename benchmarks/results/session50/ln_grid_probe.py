"""The norms' one-pass backward at GPT-2's 16384 x 768 (LayerNorm with dres, dg, dβ and dx's
column sums; with and without xn stored) in main's configuration against choices the fiftieth
session's probe did not time: fewer one-warp programs per SM (fewer partials to write and sum)
and two rows a step on one warp, each with the next rows loaded ahead (STAGES = 0). 10 launches
a CUDA graph, partials' sum included, rounds in alternating order, medians; errors against
float64; `torch.add` of two such tensors into a third as the bandwidth reference.
Run: python benchmarks/results/session50/ln_grid_probe.py"""

import sys
from pathlib import Path

import torch
import triton

here = Path(__file__).resolve().parent
sys.path[:0] = [str(here.parent / "session44"), str(here.parent / "session40")]
import ln_backward_probe as lnb  # noqa: E402
import ln_linear_probe as probe  # noqa: E402

from coda.codegen.kernel import launch_cached  # noqa: E402
from coda.nn import layer_norm_grad  # noqa: E402


def main() -> None:
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print(torch.cuda.get_device_name(0), flush=True)
    grid = [(1, 1, p, 0) for p in (4, 6, 8, 10)] + [(2, 1, p, 0) for p in (2, 4, 6, 8)] + [(1, 1, 8, 3)]
    for save in (False, True):
        (x, dy, dres, g, beta, row), exact = lnb.case(16384, 768)
        exact = exact if save else exact[:3] + exact[4:]
        graphs, errs = {}, {}
        for choice in [None] + [(r, w, p * sms, s) for r, w, p, s in grid]:
            def run(choice=choice):
                return layer_norm_grad.launch(dy, x, g, **row, dres=dres, need_dx=True,
                                              param_dtypes=(torch.bfloat16,) * 2, choice=choice, save_xn=save,
                                              beta=beta if save else None, sum_dx=torch.bfloat16)
            try:
                errs[choice] = lnb.errors([t for t in run() if t is not None], exact)
                graphs[choice] = probe.graphed(lambda run=run: [run() for _ in range(10)])
            except Exception as error:
                print(f"{choice} failed: {str(error)[:160]}", flush=True)
        out = torch.empty_like(dy)
        graphs["torch.add"] = probe.graphed(lambda: [torch.add(dy, dres, out=out) for _ in range(10)])
        us = {k: 100 * v for k, v in probe.time_graphs(graphs, 6, 5).items()}
        print(f"\n16384x768 xn stored={save}: µs a launch (partials' sum included; None: main's config), "
              "rel. errors vs float64", flush=True)
        for key in sorted(us, key=us.get):
            e = " ".join(f"{v:.1e}" for v in errs.get(key, []))
            print(f"  {key!s:22s} {us[key]:7.1f}  {e}", flush=True)


def partials_sum() -> None:
    """`sum_partials` alone over GPT-2's [3, 1056, 768] partials (eight one-warp programs an SM on
    132 SMs): main's blocks (BLOCK_P = 1024 partials by BLOCK_C = 8 columns a program) against
    others, µs a launch, each checked against torch's sum."""
    parts, n = 8 * torch.cuda.get_device_properties(0).multi_processor_count, 768
    partials = torch.randn(3, parts, n, device="cuda")
    want = partials.sum(1)
    outs = [torch.empty(n, device="cuda") for _ in range(3)]
    graphs = {}
    for block_p, block_c in [(1024, 8), (512, 16), (256, 32), (128, 64), (256, 16), (512, 8), (1024, 16)]:
        def run(block_p=block_p, block_c=block_c):
            launch_cached(layer_norm_grad.sum_partials, (triton.cdiv(3 * n, block_c),),
                          [partials, *outs, n, parts],
                          dict(VECTORS=3, BLOCK_P=block_p, BLOCK_C=block_c, num_warps=8), partials.device)
        run()
        err = max((o - w).abs().max().item() for o, w in zip(outs, want, strict=True))
        graphs[(block_p, block_c)] = probe.graphed(lambda run=run: [run() for _ in range(10)])
        print(f"  partials' sum {block_p}x{block_c}: max error {err:.1e}", flush=True)
    us = {k: 100 * v for k, v in probe.time_graphs(graphs, 6, 5).items()}
    print(f"\nsum_partials over [3, {parts}, {n}]: µs a launch", flush=True)
    for key in sorted(us, key=us.get):
        print(f"  {key!s:12s} {us[key]:6.1f}", flush=True)


if __name__ == "__main__":
    main()
    partials_sum()
