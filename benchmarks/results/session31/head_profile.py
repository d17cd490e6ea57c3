"""Every GPU kernel of GPT-2's LM head + cross-entropy, forward + backward (16384 × 768 × 50257,
bf16, the exponential path), from one step under torch.profiler: µs and launches per kernel, and
the total against the step's CUDA-graph time (what the kernels' sum leaves out is idle time).

    PYTHONPATH=src python benchmarks/results/session31/head_profile.py [--json out.json]
"""

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from kernel_configs import graph_us

from coda.ops.cross_entropy import linear_cross_entropy


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    torch.manual_seed(0)
    t, h, v = 16384, 768, 50257
    x = torch.randn(t, h, device="cuda", dtype=torch.bfloat16).requires_grad_()
    w = (torch.randn(v, h, device="cuda") * 0.05).to(torch.bfloat16).requires_grad_()
    target = torch.randint(0, v, (t,), device="cuda")

    def step():
        loss = linear_cross_entropy(x, w, target, exponential=True)   # opt-in since the 31st session
        return (loss, *torch.autograd.grad(loss, [x, w]))

    for _ in range(2):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    us, launches = defaultdict(float), defaultdict(int)
    for event in prof.events():
        if event.device_type == DeviceType.CUDA and not event.is_user_annotation:
            us[event.name] += event.device_time_total
            launches[event.name] += 1
    rows = sorted(us.items(), key=lambda item: -item[1])
    for name, time in rows:
        print(f"{time:9.1f} us {launches[name]:3d}x  {name[:110]}")
    total, graph = sum(us.values()), graph_us(step, 5)
    print(f"kernels {total:.1f} us in {sum(launches.values())} launches; CUDA graph {graph:.1f} us a step")
    if args.json:
        Path(args.json).write_text(json.dumps(dict(graph_us=graph, kernels=[
            [name, time, launches[name]] for name, time in rows]), indent=1))


if __name__ == "__main__":
    main()
