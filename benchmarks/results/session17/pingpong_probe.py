"""Seventeenth session: where a fused epilogue's time goes in the ping-pong kernel.

    python pingpong_probe.py clocks --json out.json   # each case timed (do_bench), NVML clocks beside
    python pingpong_probe.py launch SHAPE CASE CONFIG # one launch, for Nsight Compute

`clocks` times benchmarks/gemm.py's cases in the ping-pong kernel (s4e4, s4e2) and the Triton
kernel at a short-K and a long-K shape, sampling the SM clock and the power cap while each runs,
so that a fused case's time over plain can be split into a slower clock and more cycles.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import torch
import triton.testing

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import gpu_clock
from gemm import CASES, operands

import coda
from coda.codegen import tuning
from coda.codegen.tuning import Config

SHAPES = [(16384, 3072, 768), (16384, 8192, 2048)]
CONFIGS = {"pp_s4e4": Config(128, 128, 64, 4, 4, split_epilogue=4, pingpong=True),
           "pp_s4e2": Config(128, 128, 64, 4, 4, split_epilogue=2, pingpong=True)}


def setup(shape, case):
    m, n, k = shape
    torch.manual_seed(0)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k**0.5
    prog = coda.compile(CASES[case]["coda"])
    used = {name: v for name, v in operands(m, n).items() if name in prog.ir.params}
    return prog, prog.bind(a, w.T, seed=1, **used)


def clocks(path: str) -> None:
    rows = []
    for shape in SHAPES:
        for case in ("plain", "bias_gelu", "residual", "rowsumsq", "residual_rowsumsq", "dgelu",
                     "dgelu_bias_grad", "bias_gelu_dropout_residual"):
            prog, launch = setup(shape, case)
            configs = dict(CONFIGS, triton=tuning.heuristic("hopper", *shape, pingpong=False))
            for label, config in configs.items():
                try:
                    plan, _ = prog.triton.start(launch, config)
                except Exception as error:  # does not fit shared memory
                    print(shape, case, label, "failed:", type(error).__name__, flush=True)
                    continue
                run = lambda: plan.run(launch.a, launch.b, launch.values, None, launch.seed)  # noqa: E731
                times = []
                with gpu_clock.Sampler(torch.device("cuda"), interval=0.005) as sampler:
                    for _ in range(3):
                        times.append(triton.testing.do_bench(run, warmup=25, rep=100, return_mode="median"))
                clock = sampler.summary()
                us = statistics.median(times) * 1e3
                rows.append(dict(shape=shape, case=case, config=label, us=us, clock=clock))
                mhz = clock["sm_clock_mhz_mean"] if clock else float("nan")
                capped, watts = (clock["power_capped"], clock["power_w_mean"]) if clock else (0, 0)
                print(f"{shape} {case:28s} {label:8s} {us:8.1f} us  {mhz:6.0f} MHz  capped {capped:.2f}  "
                      f"{watts:.0f} W", flush=True)
                Path(path).write_text(json.dumps(rows, indent=1))


def launch_once(shape_text: str, case: str, config_text: str) -> None:
    shape = tuple(int(x) for x in shape_text.split("x"))
    prog, launch = setup(shape, case)
    config = CONFIGS.get(config_text) or tuning.heuristic("hopper", *shape, pingpong=False)
    plan, _ = prog.triton.start(launch, config)   # compiled and launched once (the profiled launch)
    plan.run(launch.a, launch.b, launch.values, None, launch.seed)
    torch.cuda.synchronize()


if __name__ == "__main__":
    if sys.argv[1] == "clocks":
        clocks(sys.argv[3])
    else:
        launch_once(*sys.argv[2:5])
