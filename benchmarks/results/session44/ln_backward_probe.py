"""LayerNorm's one-pass backward with each row on one warp (rows_on_warps.patch: rows as tuples
of [ROWS, 256] chunks) against main's kernel (rows padded to 1024 columns across four warps,
`coda.nn.layer_norm_grad`), in one process; the patched module is loaded from --variant (a copy
of src/ with the patch applied: next_session.sh makes it).

GPT-2's shapes (16384 x 768, dres, dg and dβ, dx's column sums; with and without the norm's
output xn, as ln_1 and ln_2 run it) and wider rows: every choice (ROWS, warps, programs, STAGES)
of a grid, 10 launches a CUDA graph (the partials' sum included), rounds in alternating order,
medians; each result against float64 autograd. The last line, "best: ROWS,warps,programs per
SM,STAGES", is the fastest choice at 768 columns (summed over both forms), for the patch's
config() (call2.sh takes it as LN_CONFIG).
Run: python benchmarks/results/session44/ln_backward_probe.py --variant PATH"""

import argparse
import importlib.util
import sys
from pathlib import Path

import torch

here = Path(__file__).resolve().parent
sys.path[:0] = [str(here.parent / "session40"), str(here.parents[1])]
import ln_linear_probe as probe  # noqa: E402

from coda.nn import layer_norm_grad  # noqa: E402


def load_variant(path: str):
    """The patched kernel's module, as coda.nn.layer_norm_grad_rows (its relative imports are
    main's)."""
    spec = importlib.util.spec_from_file_location("coda.nn.layer_norm_grad_rows", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def case(m: int, n: int):
    gen = torch.Generator(device="cuda").manual_seed(0)
    x, dy, dres = (torch.randn(m, n, generator=gen, device="cuda").to(torch.bfloat16) for _ in range(3))
    g, beta = (1 + 0.1 * torch.randn(n, generator=gen, device="cuda")).to(torch.bfloat16), \
        (0.1 * torch.randn(n, generator=gen, device="cuda")).to(torch.bfloat16)
    d = x.float() - x[:, 0:1].float()
    row = dict(shift=x[:, 0], s=d.sum(1), ss=(d * d).sum(1), inv_n=1.0 / n, eps=1e-5)
    xr, gr, br = (t.double().requires_grad_() for t in (x, g, beta))
    out = torch.nn.functional.layer_norm(xr, (n,), gr, br, 1e-5)
    out.backward(dy.double())
    dx = xr.grad + dres.double()
    exact = (dx, gr.grad, br.grad, out.detach(), dx.sum(0))
    return (x, dy, dres, g, beta, row), exact


def errors(got, exact) -> list[float]:
    return [((a.double() - e).norm() / e.norm()).item() for a, e in zip(got, exact, strict=True)
            if a is not None]


def sweep(rows) -> tuple:
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    # (ROWS, warps, programs per SM, STAGES): a row a warp in four, eight, two warps or one
    # (about 230 registers a thread: two programs of four warps fit an SM), and two warps a row
    new_grid = ([(4, 4, p, s) for p in (1, 2, 3) for s in (2, 3)] + [(8, 8, 1, s) for s in (2, 3)]
                + [(2, 2, 4, s) for s in (2, 3)] + [(1, 1, 8, s) for s in (2, 3)] + [(2, 4, 2, 3)])
    best = {}
    for (m, n), save in [((16384, 768), False), ((16384, 768), True), ((16384, 1024), False),
                         ((8192, 2048), False), ((8192, 4096), False)]:
        (x, dy, dres, g, beta, row), exact = case(m, n)
        forms = {("main", None): layer_norm_grad.launch, ("rows", None): rows.launch}
        if n == 768:
            forms.update({("rows", (r, w, p * sms, s)): rows.launch for r, w, p, s in new_grid})
        graphs, errs = {}, {}
        for (name, choice), launch in forms.items():
            def run(launch=launch, choice=choice):
                return launch(dy, x, g, **row, dres=dres, need_dx=True,
                              param_dtypes=(torch.bfloat16, torch.bfloat16), choice=choice,
                              beta=beta if save else None, sum_dx=torch.bfloat16)
            try:
                got = run()
                errs[(name, choice)] = errors(got[:5], exact)
                graphs[(name, choice)] = probe.graphed(lambda run=run: [run() for _ in range(10)])
            except Exception as error:   # a choice that does not compile or fit
                print(f"{m}x{n} {name} {choice} failed: {str(error)[:100]}", flush=True)
        us = {k: 100 * v for k, v in probe.time_graphs(graphs, 6, 5).items()}   # ms / 10 launches -> µs
        print(f"\n{m}x{n} xn stored={save}: µs a launch (partials' sum included), rel. errors "
              "dx, dg, dβ, xn, dx sums vs float64", flush=True)
        for key in sorted(us, key=us.get):
            print(f"  {key[0]:5s} {key[1]!s:22s} {us[key]:7.1f}  " +
                  " ".join(f"{e:.1e}" for e in errs[key]), flush=True)
        if n == 768:
            for key, v in us.items():
                if key[0] == "rows" and key[1] is not None:
                    best.setdefault(key[1], []).append(v)
    choice = min(best, key=lambda c: sum(best[c]))
    print(f"\nfastest choice at 768 columns over both forms: {choice} "
          f"({', '.join(f'{v:.1f}' for v in best[choice])} µs)", flush=True)
    return choice


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--variant", required=True, help="the patched layer_norm_grad.py")
    choice = sweep(load_variant(parser.parse_args().variant))
    print("best: " + ",".join(map(str, (choice[0], choice[1], choice[2] // torch.cuda.get_device_properties(0)
                                        .multi_processor_count, choice[3]))), flush=True)


if __name__ == "__main__":
    main()
