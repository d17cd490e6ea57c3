"""A GEMM kernel's speed in a burst and held at the power cap, with its power and clock.

At the 700 W cap a training step's rate is its energy: CODA's GPT-2 step runs at a 6-9% lower
SM clock than torch.compile's (it has shed the low-power element-wise kernels), so what a fused
GEMM costs in the step is its energy per launch more than its time in a short timing. For GPT-2's
forward GEMM shapes this times CODA's kernels in each configuration and cuBLAS's, (1) in a burst
(one CUDA graph of ~10 ms of launches replayed after 0.5 s idle: boost clock, power to spare) and
(2) held (the graph replayed back to back for HOLD seconds; the last half timed, with NVML's SM
clock and power sampled every 10 ms), and gives the held energy per launch (mean power x time).

    python benchmarks/results/session68/power_probe.py [--hold 1.2] [--json power_probe.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
from triton.runtime.errors import OutOfResources

ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "benchmarks")]
import gemm  # noqa: E402
import gpu_clock  # noqa: E402

import coda  # noqa: E402
from coda.codegen import tuning  # noqa: E402

#: (shape, case): GPT-2's fc1 forward (bias + GELU) and fc2 / c_proj forward (residual + row sums)
CASES = [((16384, 3072, 768), "plain"), ((16384, 3072, 768), "bias_gelu"),
         ((16384, 768, 3072), "plain"), ((16384, 768, 3072), "residual_rowsumsq")]
CODA_CONFIGS = {
    "triton 128x256 s3 e2": tuning.Config(128, 256, 64, 8, 3, split_epilogue=2),
    "triton 128x128 s4": tuning.Config(128, 128, 64, 8, 4),
    "pingpong 128x128 s4 e2": tuning.Config(128, 128, 64, 4, 4, split_epilogue=2, pingpong=True),
    "pingpong 128x128 s5 e4": tuning.Config(128, 128, 64, 4, 5, split_epilogue=4, pingpong=True),
    "pingpong 128x128 s3 e2": tuning.Config(128, 128, 64, 4, 3, split_epilogue=2, pingpong=True),
}


def graphed(fn, launches: int) -> torch.cuda.CUDAGraph:
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(launches):
            fn()
    return graph


def per_launch_us(graph, launches: int, replays: int) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / (launches * replays)


def measure(fn, hold: float) -> dict:
    once = per_launch_us(graphed(fn, 1), 1, 1)   # also compiles and warms
    launches = max(1, int(10_000 / once))
    graph = graphed(fn, launches)
    bursts = []
    for _ in range(2):
        time.sleep(0.5)
        bursts.append(per_launch_us(graph, launches, 1))
    time.sleep(0.5)
    replays = max(1, int(hold / 2 / (launches * once * 1e-6)))
    per_launch_us(graph, launches, replays)          # the first half: the clock settles
    with gpu_clock.Sampler(torch.device("cuda")) as clocks:
        held = per_launch_us(graph, launches, replays)
    summary = clocks.summary() or {}
    power = summary.get("power_w_mean")
    return dict(burst_us=statistics.median(bursts), held_us=held, held_mhz=summary.get("sm_clock_mhz_mean"),
                held_w=power, held_mj=None if power is None else power * held * 1e-3,
                power_capped=summary.get("power_capped"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hold", type=float, default=1.2)
    parser.add_argument("--json", default="power_probe.json")
    args = parser.parse_args()
    rows = []
    for (m, n, k), case in CASES:
        spec = gemm.CASES[case]
        a, w, ops = gemm.inputs(m, n, k)
        prog = coda.compile(spec["coda"])
        used = gemm.used_operands(prog, ops)
        launch = prog.bind(a, w.T, seed=1, **used)
        runs = {"cublas" if case == "plain" else "eager": lambda: spec["eager"](a, w, ops)}
        if spec["lt"] is not None:
            runs["cublaslt"] = lambda: spec["lt"](a, w, ops)
        for label, config in CODA_CONFIGS.items():
            try:
                plan, _ = prog.triton.start(launch, config)
            except OutOfResources:
                continue
            runs[f"coda {label}"] = (lambda plan=plan: plan.run(launch.a, launch.b, launch.values, None,
                                                                 launch.seed))
        for label, fn in runs.items():
            row = dict(shape=f"{m}x{n}x{k}", case=case, kernel=label, **measure(fn, args.hold))
            rows.append(row)
            print(f"{row['shape']:>16} {case:>18} {label:>28}: burst {row['burst_us']:7.1f} us, held "
                  f"{row['held_us']:7.1f} us at {row['held_mhz'] or 0:6.0f} MHz {row['held_w'] or 0:5.0f} W"
                  f" = {row['held_mj'] or 0:6.2f} mJ", flush=True)
        print(f"   (CODA's heuristic here: {tuning.heuristic('hopper', m, n, k)})", flush=True)
    Path(args.json).write_text(json.dumps(dict(gpu=torch.cuda.get_device_name(), hold_s=args.hold,
                                               torch=torch.__version__, rows=rows), indent=1))


if __name__ == "__main__":
    main()
