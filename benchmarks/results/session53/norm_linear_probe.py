"""Where the norm-folded linears' fwd+bwd time goes: each implementation (eager, torch.compile,
CODA) captured in a CUDA graph, timed in interleaved rounds, and one replay profiled kernel by
kernel. The micro suite's cases (benchmarks/micro.py), the same tensors.

    python benchmarks/results/session53/norm_linear_probe.py [--ops ...] [--sizes ...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "benchmarks"))
import micro  # noqa: E402
import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402


def capture(step, replays: int = 10) -> torch.cuda.CUDAGraph:
    """`replays` calls of `step` in one graph (warmed up on a side stream first)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(replays):
            step()
    torch.cuda.synchronize()
    return graph


def time_graph(graph: torch.cuda.CUDAGraph, replays: int) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / replays


def kernels(graph: torch.cuda.CUDAGraph, replays: int) -> list[tuple[str, float, int]]:
    graph.replay()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        graph.replay()
        torch.cuda.synchronize()
    table: dict[str, list[float]] = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            table.setdefault(e.name[:90], []).append(e.device_time)
    return sorted(((n, sum(t) / replays, len(t) // replays) for n, t in table.items()), key=lambda r: -r[1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ops", default="rms_norm_linear,layer_norm_linear")
    parser.add_argument("--sizes", default="gpt2,llama1b,llama7b")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json", default=os.environ.get("OUT", "/tmp") + "/norm_linear_probe.json")
    args = parser.parse_args()
    replays, results = 10, []
    for op in args.ops.split(","):
        for size in args.sizes.split(","):
            case, impls, _ = micro.prepare(op, size, False, ["default"])
            graphs = {impl: capture(micro.fwd_bwd(fn, case.grads_of), replays)
                      for impl, fn in impls.items() if impl in ("eager", "compile", "coda")}
            times = {impl: [] for impl in graphs}
            for r in range(args.rounds):
                order = list(graphs) if r % 2 == 0 else list(graphs)[::-1]
                for impl in order:
                    print(f"  replaying {impl}", flush=True)
                    times[impl].append(time_graph(graphs[impl], replays))
            med = {impl: statistics.median(t) for impl, t in times.items()}
            print(f"\n== {op} {size}: " + ", ".join(f"{i} {m:.1f} us" for i, m in med.items())
                  + f"; coda / eager {med['coda'] / med['eager']:.3f}, coda / compile "
                  f"{med['coda'] / med['compile']:.3f}", flush=True)
            row = dict(op=op, size=size, median_us=med, rounds_us=times, kernels={})
            for impl, graph in graphs.items():
                table = kernels(graph, replays)
                row["kernels"][impl] = table
                print(f"  -- {impl}: {sum(t for _, t, _ in table):.1f} us of kernels")
                for name, us, count in table[:12]:
                    print(f"     {us:8.1f} us x{count}  {name}")
            results.append(row)
            del graphs, impls, case
            torch.cuda.empty_cache()
    Path(args.json).write_text(json.dumps(dict(gpu=torch.cuda.get_device_name(), rows=results), indent=1))


if __name__ == "__main__":
    main()
