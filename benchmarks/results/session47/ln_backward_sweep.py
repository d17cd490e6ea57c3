"""LayerNorm's one-pass backward as landed in the 47th session (a row a warp in chunks of 256 up
to 768 values, config (1, 1, 8/SM, 3)) against the kernel before it (--old: main's file before
the change, every row one padded chunk), in one process: more one-warp programs per SM at 768
columns, and the one-warp layout at 512, 1024 and 2048 columns (where the default keeps rows over
four warps). 10 launches a CUDA graph, partials' sum included, medians; errors vs float64.
Run: git show 6114727:src/coda/nn/layer_norm_grad.py > variants/old_lng.py
     python benchmarks/results/session47/ln_backward_sweep.py --old variants/old_lng.py"""

import argparse
import sys
from pathlib import Path

import torch

here = Path(__file__).resolve().parent
sys.path[:0] = [str(here.parent / "session44"), str(here.parent / "session40")]
import ln_backward_probe as lnb  # noqa: E402
import ln_linear_probe as probe  # noqa: E402

from coda.nn import layer_norm_grad  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--old", required=True, help="layer_norm_grad.py before the change")
    old = lnb.load_variant(parser.parse_args().old)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for (m, n) in [(16384, 768), (16384, 512), (16384, 1024), (8192, 2048)]:
        (x, dy, dres, g, _, row), exact = lnb.case(m, n)
        forms = {("old", None): old.launch, ("new", None): layer_norm_grad.launch}
        per_sm = (4, 8, 12, 16) if n == 768 else (8,)
        forms.update({("new", (1, 1, p * sms, s)): layer_norm_grad.launch for p in per_sm for s in (2, 3)})
        graphs, errs = {}, {}
        for (name, choice), launch in forms.items():
            def run(launch=launch, choice=choice):
                return launch(dy, x, g, **row, dres=dres, need_dx=True,
                              param_dtypes=(torch.bfloat16, torch.bfloat16), choice=choice,
                              sum_dx=torch.bfloat16)
            try:
                errs[(name, choice)] = lnb.errors(run()[:5], exact)
                graphs[(name, choice)] = probe.graphed(lambda run=run: [run() for _ in range(10)])
            except Exception as error:
                print(f"{m}x{n} {name} {choice} failed: {str(error)[:100]}", flush=True)
        us = {k: 100 * v for k, v in probe.time_graphs(graphs, 6, 5).items()}
        print(f"\n{m}x{n}: µs a launch (partials' sum included), rel. errors dx, dg, dβ, dx sums", flush=True)
        for key in sorted(us, key=us.get):
            print(f"  {key[0]:4s} {key[1]!s:22s} {us[key]:7.1f}  " + " ".join(f"{e:.1e}" for e in errs[key]),
                  flush=True)


if __name__ == "__main__":
    main()
