"""Clock and power while one GEMM runs back to back: is a fused epilogue's cost time or energy?

    python benchmarks/power_probe.py [--shape 16384x3072x768] [--variants plain,bias_gelu,...]

Each variant of `ablation.py` (and cuBLAS's bare GEMM) is captured as a CUDA graph of 20
launches and replayed for `--seconds` while `nvidia-smi` samples the SM clock, the power draw
and the active throttle reasons every 50 ms. If the GPU sits at its power limit, the SM clock is
what an epilogue's work costs: a variant slower by the ratio of the clocks did no worse per
clock. Prints one row per variant (µs a launch from the replays' own events, median clock and
power of the samples taken while they ran) and writes them to `--json`.
"""

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
import side_by_side  # benchmarks/, beside this script
from ablation import VARIANTS

import coda

QUERY = "clocks.sm,power.draw,power.limit,clocks_throttle_reasons.active"


def sampled(run, seconds: float) -> tuple[float, list[list[str]]]:
    """µs a launch of `run` (a graph replay of 20) repeated for `seconds`, and the nvidia-smi
    samples taken meanwhile."""
    smi = subprocess.Popen(["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits",
                            "-lms", "50"], stdout=subprocess.PIPE, text=True)
    time.sleep(0.3)   # nvidia-smi's start-up, before the work
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    replays, began = 0, time.perf_counter()
    start.record()
    while time.perf_counter() - began < seconds:
        for _ in range(20):
            run()
        replays += 20
        torch.cuda.synchronize()
    end.record()
    torch.cuda.synchronize()
    smi.terminate()
    lines = smi.communicate()[0].strip().splitlines()
    samples = [[field.strip() for field in line.split(",")] for line in lines]
    return start.elapsed_time(end) * 1e3 / (replays * 20), samples[len(samples) // 5:]  # past the ramp


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shape", default="16384x3072x768")
    parser.add_argument("--variants", default="plain,bias,bias_gelu,bias_save,bias_gelu_slope")
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--json", default="benchmarks/results/power_probe.json")
    args = parser.parse_args()
    side_by_side.require_gpu("benchmarks/power_probe.py")
    m, n, k = map(int, args.shape.split("x"))
    torch.manual_seed(0)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k**0.5
    ops = {"bias": torch.randn(n, device="cuda", dtype=torch.bfloat16),
           "residual": torch.randn(m, n, device="cuda", dtype=torch.bfloat16),
           "slope": torch.rand(m, n, device="cuda", dtype=torch.bfloat16)}
    calls = {"cublas": lambda: torch.matmul(a, w.T)}
    for name in args.variants.split(","):
        prog = coda.compile(VARIANTS[name])
        launch = prog.bind(a, w.T, **{key: v for key, v in ops.items() if key in prog.ir.params})
        plan = prog.triton.plan(launch, prog.triton.config(launch, prog.triton.kernel(launch)))
        calls[name] = lambda plan=plan, launch=launch: plan.run(launch.a, launch.b, launch.values, None, 0)
    rows = []
    for name, call in calls.items():
        call()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(20):
                call()
        us, samples = sampled(graph.replay, args.seconds)
        clocks = [float(s[0]) for s in samples if s[0].replace(".", "").isdigit()]
        power = [float(s[1]) for s in samples if s[1].replace(".", "").isdigit()]
        row = dict(variant=name, us=round(us, 1), sm_mhz=statistics.median(clocks) if clocks else None,
                   watts=statistics.median(power) if power else None,
                   limit_w=samples[0][2] if samples else None,
                   throttle=sorted({s[3] for s in samples}) if samples else None)
        row["us_times_mhz"] = round(us * row["sm_mhz"], 0) if row["sm_mhz"] else None
        rows.append(row)
        print(row, flush=True)
        time.sleep(1.0)   # let the clock recover between variants
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(dict(gpu=torch.cuda.get_device_name(), shape=[m, n, k],
                                               command=" ".join(sys.argv), rows=rows), indent=1))


if __name__ == "__main__":
    main()
