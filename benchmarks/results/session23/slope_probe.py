"""Twenty-third session: the activation's saved slope f'(pre) against the saved pre-activation.

At GPT-2's and BERT's MLP shape (16384 tokens, 768 -> 3072), µs per launch from CUDA graphs of 20
launches (median of 5 replays), each case timed twice, interleaved:
  fc1 forward:  h = f(x @ w1.T + b1) saving pre (before) or slope = f'(pre) (after)
  dh backward:  dpre = (dy @ w2) * f'(pre) (before) or * slope (after), db1 = col_sum(dpre)
in the heuristic configuration (ping-pong, 2 epilogue slices) and with 4 slices; CODA's plain
GEMM and cuBLAS's beside them. Also the error of each backward's dpre and db1 against float64.
Writes $OUT/slope_probe.json (or ./slope_probe.json).
"""

import json
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from kernel_configs import graph_us  # benchmarks/kernel_configs.py

import coda
from coda.codegen.tuning import Config

M, N, K = 16384, 3072, 768
REPS = 20
DT = torch.bfloat16
FWD_PRE = "EPILOGUE f(bias: col) {{ h = input + bias; save pre = h; output = {f}(h); }}"
FWD_SLOPE = "EPILOGUE f(bias: col) {{ h = input + bias; save slope = {df}(h); output = {f}(h); }}"
BWD_PRE = "EPILOGUE g(pre: tile) {{ output = input * {df}(pre); db = col_sum(output); }}"
BWD_SLOPE = "EPILOGUE g(slope: tile) { output = input * slope; db = col_sum(output); }"



def runner(text: str, a, b, config, **values):
    prog = coda.compile(text)
    launch = prog.bind(a, b, seed=1, **values)
    plan, _ = prog.triton.start(launch, config)
    return lambda: plan.run(launch.a, launch.b, launch.values, None, launch.seed), plan


def main() -> None:
    torch.manual_seed(0)
    dev = "cuda"
    x = torch.randn(M, K, device=dev, dtype=DT)
    w1 = torch.randn(N, K, device=dev, dtype=DT) * K ** -0.5
    b1 = torch.randn(N, device=dev, dtype=DT) * 0.1
    dy = torch.randn(M, K, device=dev, dtype=DT)
    w2 = torch.randn(K, N, device=dev, dtype=DT) * N ** -0.5   # fc2's weight [768, 3072]
    configs = {"s2": Config(128, 128, 64, 4, 4, split_epilogue=2, pingpong=True),
               "s4": Config(128, 128, 64, 4, 4, split_epilogue=4, pingpong=True)}
    cases = {}
    plain, _ = runner("EPILOGUE plain() { output = input; }", x, w1.T, configs["s2"])
    cases["coda_plain"] = plain
    cases["cublas"] = lambda: torch.matmul(x, w1.T)
    pre = (x @ w1.T + b1)
    results = {"shape": [M, N, K], "reps": REPS, "gpu": torch.cuda.get_device_name(), "cases": {},
               "errors": {}}
    for act, fn, grad in (("gelu", "gelu", "gelu_grad"), ("gelu_erf", "gelu_erf", "gelu_erf_grad")):
        for label, config in configs.items():
            before, _ = runner(FWD_PRE.format(f=fn), x, w1.T, config, bias=b1)
            after, plan = runner(FWD_SLOPE.format(f=fn, df=grad), x, w1.T, config, bias=b1)
            cases[f"{act}/fwd_pre/{label}"] = before
            cases[f"{act}/fwd_slope/{label}"] = after
            slope = plan.run(x, w1.T, {"bias": b1}, None, 1)["slope"]
            pre_b = pre.to(DT)
            bwd_before, _ = runner(BWD_PRE.format(df=grad), dy, w2, config, pre=pre_b)
            bwd_after, _ = runner(BWD_SLOPE, dy, w2, config, slope=slope)
            cases[f"{act}/bwd_pre/{label}"] = bwd_before
            cases[f"{act}/bwd_slope/{label}"] = bwd_after
        # errors of dpre, db1 against float64 (pre from the float64 GEMM)
        pre64 = x.double() @ w1.double().T + b1.double()
        p = pre64.requires_grad_()
        f64 = torch.nn.functional.gelu(p, approximate="tanh" if act == "gelu" else "none")
        (slope64,) = torch.autograd.grad(f64.sum(), p)
        dh64 = dy.double() @ w2.double()
        ref = dh64 * slope64
        approximate = "tanh" if act == "gelu" else "none"
        eager = torch.ops.aten.gelu_backward(dy @ w2, pre.to(DT), approximate=approximate)
        old = coda.compile(BWD_PRE.format(df=grad))(dy, w2, pre=pre.to(DT))
        new = coda.compile(BWD_SLOPE)(dy, w2, slope=slope)

        def rel(t, r):
            return ((t.double() - r).norm() / r.norm()).item()
        results["errors"][act] = {
            "dpre_eager": rel(eager, ref), "dpre_pre": rel(old["output"], ref),
            "dpre_slope": rel(new["output"], ref),
            "db_eager": rel(eager.float().sum(0), ref.sum(0)), "db_pre": rel(old["db"], ref.sum(0)),
            "db_slope": rel(new["db"], ref.sum(0)),
            "slope_vs_f64": rel(slope, slope64)}
        print(act, results["errors"][act], flush=True)
    for rnd in range(2):
        for name, fn in cases.items():
            us = graph_us(fn, REPS)
            results["cases"].setdefault(name, []).append(us)
            print(f"round {rnd} {name}: {us:.1f} us", flush=True)
    out = os.path.join(os.environ.get("OUT", "."), "slope_probe.json")
    with open(out, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
