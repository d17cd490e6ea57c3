"""Sixteenth session: why BERT's fc1 (`coda_gemm_linear_gelu_erf`, 16384 x 3072 x 768) took 335 µs a
call in the profiled CODA + graph step where GPT-2's tanh-GELU fc1 took 135 µs at the same shape.

Times (CUDA graphs, device time only) the forward `linear` epilogue (bias, GELU, saved pre-activation)
for the tanh GELU, the erf GELU as now written (`tl_math.one_plus_erf`) and the erf GELU through
libdevice's erff (the previous `tl_math.gelu_erf`, swapped in for its own programs), with the weight
as an nn.Linear stores it (K contiguous) and as GPT-2's Conv1D does (N contiguous), in the heuristic's
ping-pong configuration and in the Triton kernel's; cuBLAS's GEMM and cuBLASLt's bias + GELU beside;
the backward map dGELU + bias gradient, both erf versions; the errors against float64.

    python benchmarks/results/session16/gelu_erf_probe.py [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

if "--smoke" in sys.argv:
    os.environ.setdefault("TRITON_INTERPRET", "1")   # before Triton is imported

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from kernel_configs import Setup, graph_time

import coda
from coda.codegen import tl_math
from coda.codegen.kernel import Plan
from coda.codegen.tuning import Config


@triton.jit
def libdevice_gelu_erf(x):
    return 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476))


@triton.jit
def libdevice_gelu_erf_grad(x):
    return (0.5 * (1.0 + tl.erf(x * 0.7071067811865476))
            + x * tl.exp(-0.5 * x * x) * 0.3989422804014327)


def timed(prog, a, b, operands, config: Config | None, setup: Setup) -> tuple[float, dict]:
    launch = prog.bind(a, b, **operands)
    kernel = prog.triton.kernel(launch, config) if config else prog.triton.kernel(launch)
    config = config or prog.triton.config(launch, kernel)
    plan = Plan(kernel, config, launch)
    out = plan.run(launch.a, launch.b, launch.values, None, 0)
    return graph_time(lambda: plan.run(launch.a, launch.b, launch.values, None, 0), setup, 20), out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json")
    parser.add_argument("--smoke", action="store_true", help="tiny float32 shapes, interpreter, untimed")
    args = parser.parse_args()
    setup = Setup(smoke=args.smoke)
    m, n, k = (64, 64, 32) if args.smoke else (16384, 3072, 768)
    torch.manual_seed(0)
    x = setup.tile(m, k)
    w = setup.tile(n, k) / k**0.5
    bias = setup.tile(n) * 0.1
    layouts = {"k_major": w.T, "n_major": w.T.contiguous()}
    pre64 = (x.double() @ w.double().T + bias.double())
    configs = {"heuristic": None}
    if not args.smoke:
        configs["triton128x256s3e2"] = Config(128, 256, 64, 8, 3, split_epilogue=2)
    rows = []

    def record(**row) -> None:
        rows.append(row)
        print(row, flush=True)

    for layout, b in layouts.items():
        record(case="cublas_mm", layout=layout, us=round(graph_time(lambda b=b: x @ b, setup, 20), 1))
        record(case="cublaslt_bias_gelu", layout=layout, us=round(graph_time(
            lambda b=b: torch._addmm_activation(bias, x, b, use_gelu=True), setup, 20), 1))
    eager = torch.nn.functional.gelu(pre64.to(setup.dtype).float())
    eager_err = ((eager.double() - torch.nn.functional.gelu(pre64)).abs().max()).item()
    # the libdevice versions first, in programs of their own name, then the current functions back
    current = tl_math.gelu_erf, tl_math.gelu_erf_grad
    for version in ("libdevice", "current"):
        if version == "libdevice":
            tl_math.gelu_erf, tl_math.gelu_erf_grad = libdevice_gelu_erf, libdevice_gelu_erf_grad
        for act in (["gelu_erf"] if version == "libdevice" else ["gelu", "gelu_erf"]):
            text = (f"EPILOGUE fc1_{act}_{version}(bias: col) {{ h = input + bias; save pre = h;"
                    f" output = {act}(h); }}")
            prog = coda.compile(text)
            for layout, b in layouts.items():
                for label, config in configs.items():
                    us, out = timed(prog, x, b, {"bias": bias}, config, setup)
                    ref = (torch.nn.functional.gelu(pre64) if act == "gelu_erf" else
                           torch.nn.functional.gelu(pre64, approximate="tanh"))
                    err = (out["output"].double() - ref).abs().max().item()
                    record(case=f"fc1_{act}", version=version, layout=layout, config=label, us=round(us, 1),
                           max_abs_err=err, eager_max_abs_err=eager_err if act == "gelu_erf" else None)
            grad = coda.compile(f"EPILOGUE dgelu_{act}_{version}(pre: tile) {{"
                                f" output = input * {act}_grad(pre); db = col_sum(output); }}")
            dy = setup.tile(m, n)
            pre = pre64.to(setup.dtype)
            launch = grad.bind(dy, None, pre=pre)
            kernel = grad.triton.kernel(launch)
            plan = Plan(kernel, grad.triton.config(launch, kernel), launch)
            out = plan.run(launch.a, None, launch.values, None, 0)
            us = graph_time(lambda plan=plan, launch=launch: plan.run(launch.a, None, launch.values, None, 0),
                            setup, 20)
            x64 = pre.double()
            if act == "gelu_erf":
                cdf = 0.5 * (1 + torch.erf(x64 / 2**0.5))
                dref = cdf + x64 * torch.exp(-0.5 * x64 * x64) / (2 * torch.pi) ** 0.5
            else:
                dref = torch.func.grad(lambda t: torch.nn.functional.gelu(t, approximate="tanh").sum())(x64)
            err = (out["output"].double() - dy.double() * dref).abs().max().item()
            record(case=f"map_d{act}_db", version=version, us=round(us, 1), max_abs_err=err)
        tl_math.gelu_erf, tl_math.gelu_erf_grad = current
    if args.json:
        meta = dict(device=setup.device, torch=torch.__version__, triton=triton.__version__)
        Path(args.json).write_text(json.dumps({**meta, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
