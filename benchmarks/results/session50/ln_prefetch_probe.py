"""LayerNorm's and RMSNorm's one-pass backward (coda.nn.layer_norm_grad) against the same kernel
with a prefetch in registers instead of the shared-memory pipeline (variants/lnpf: STAGES = 0, each
step issues its next rows' loads before working on the rows it holds, no barrier between warps,
so programs of several warps, a row a warp, can write fewer partials). GPT-2's 16384 x 768
(dres, dg, dβ, dx's column sums; xn stored or not) and LLaMA's RMSNorm rows (16384 x 2048 and
8192 x 4096: dres, dg, xn). 10 launches a CUDA graph, partials' sum included, rounds in
alternating order, medians; errors against float64. A bandwidth reference: torch.add of two
[m, n] tensors into a third (three tensors moved), and the time its bytes would take at that
rate for the backward's tensors.
Run: python benchmarks/results/session50/ln_prefetch_probe.py   (needs variants/lnpf)"""

import sys
from pathlib import Path

import torch

here = Path(__file__).resolve().parent
sys.path[:0] = [str(here.parent / "session44"), str(here.parent / "session40")]
import ln_backward_probe as lnb  # noqa: E402
import ln_linear_probe as probe  # noqa: E402

from coda.nn import layer_norm_grad  # noqa: E402

pf = lnb.load_variant(str(here.parents[2] / "variants" / "lnpf" / "layer_norm_grad.py"))


def rms_case(m: int, n: int):
    gen = torch.Generator(device="cuda").manual_seed(0)
    x, dy, dres = (torch.randn(m, n, generator=gen, device="cuda").to(torch.bfloat16) for _ in range(3))
    g = (1 + 0.1 * torch.randn(n, generator=gen, device="cuda")).to(torch.bfloat16)
    row = dict(ss=(x.float() ** 2).sum(1), inv_n=1.0 / n, eps=1e-6)
    xr, gr = (t.double().requires_grad_() for t in (x, g))
    out = xr * torch.rsqrt((xr * xr).mean(1, keepdim=True) + 1e-6) * gr
    out.backward(dy.double())
    return (x, dy, dres, g, None, row), (xr.grad + dres.double(), gr.grad, out.detach())


def main() -> None:
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print(torch.cuda.get_device_name(0), flush=True)
    best = {}
    cases = [("ln", 16384, 768, False), ("ln", 16384, 768, True), ("rms", 16384, 2048, True),
             ("rms", 8192, 4096, True)]
    for kind, m, n, save in cases:
        if kind == "ln":
            (x, dy, dres, g, beta, row), exact = lnb.case(m, n)
            params, sum_dx = (torch.bfloat16,) * 2, torch.bfloat16
            exact = exact if save else exact[:3] + exact[4:]
        else:
            (x, dy, dres, g, beta, row), exact = rms_case(m, n)
            params, sum_dx = (torch.bfloat16,), None
        forms = {("main", None): layer_norm_grad.launch}
        if n == 768:
            grid = [(1, 1, p, s) for p in (8, 12, 16) for s in (3, 0)]
            grid += [(w, w, p, 0) for w, ps in ((2, (4, 8, 12)), (4, (2, 4, 6, 8)), (8, (1, 2, 3, 4)))
                     for p in ps]
        else:
            warps = 8 if n > 2048 else 4
            grid = [(1, warps, p, 0) for p in (4, 6, 8)] + [(1, 8, p, 0) for p in (2, 4)] + [(1, warps, 4, 1)]
        forms.update({("lnpf", (r, w, p * sms, s)): pf.launch for r, w, p, s in grid})
        graphs, errs = {}, {}
        for (name, choice), launch in forms.items():
            def run(launch=launch, choice=choice):
                return launch(dy, x, g, **row, dres=dres, need_dx=True, param_dtypes=params, choice=choice,
                              save_xn=save, beta=beta if save else None, sum_dx=sum_dx)
            try:
                errs[(name, choice)] = lnb.errors([t for t in run() if t is not None], exact)
                graphs[(name, choice)] = probe.graphed(lambda run=run: [run() for _ in range(10)])
            except Exception as error:
                print(f"{kind} {m}x{n} {name} {choice} failed: {str(error)[:160]}", flush=True)
        out = torch.empty_like(dy)
        graphs[("torch.add", None)] = probe.graphed(lambda: [torch.add(dy, dres, out=out) for _ in range(10)])
        us = {k: 100 * v for k, v in probe.time_graphs(graphs, 6, 5).items()}
        tensors = 4 + save   # dy, x, dres, dx (+ xn)
        rate = 3 * m * n * 2 / us[("torch.add", None)] / 1e6   # TB/s
        print(f"\n{kind} {m}x{n} xn stored={save}: µs a launch (partials' sum included); torch.add "
              f"{rate:.2f} TB/s, the backward's {tensors} tensors at that rate "
              f"{tensors * m * n * 2 / rate / 1e6:.1f} µs; rel. errors vs float64", flush=True)
        for key in sorted(us, key=us.get):
            e = " ".join(f"{v:.1e}" for v in errs.get(key, []))
            print(f"  {key[0]:9s} {key[1]!s:22s} {us[key]:7.1f}  {e}", flush=True)
        for key, v in us.items():
            if key[0] == "lnpf":
                best.setdefault(n, {}).setdefault(key[1], []).append(v)
    # the fastest variant choice per width (summed over its cases), as "best<n>: rows,warps,per SM,stages"
    for n, times in best.items():
        r, w, p, s = min(times, key=lambda c: sum(times[c]))
        print(f"best{n}: {r},{w},{p // sms},{s}", flush=True)


if __name__ == "__main__":
    main()
