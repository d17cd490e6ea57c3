"""Launch one ablation_probe variant many times (is there a deadlock?).

    CODA_AUTOTUNE=0 timeout 40 python benchmarks/results/session57/hang_probe.py VARIANT [--graph]

Prints a line every 50 launches (each batch synchronized) and `done` at the end; a process that
hangs is killed by its timeout. Call 3's timings never finished (no line after the first runs).
"""

import sys
import time
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[2])]
import ablation_probe as ap  # noqa: E402

m, n, k = 16384, 3072, 768
variant = sys.argv[1]
name, _, label = variant.partition("/")
config_label, _, edit = label.partition("_")
s, e, shared = ap.CONFIGS[config_label]
config = ap.Config(128, 128, 64, 4, s, split_epilogue=e, pingpong=True, share_tiles=shared)
a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16) / k**0.5
prog, ops = ap.programs(m, n)[name]
launch = prog.bind(a, b, seed=1, **ops)
plan = ap.edited_plan(prog, launch, config, ap.EDITS[edit]) if edit else prog.triton.plan(launch, config)
began = time.time()
for batch in range(2 if "--graph" in sys.argv else 8):
    for _ in range(50):
        plan.run(a, b, launch.values, None, 1)
    torch.cuda.synchronize()
    print(f"{variant}: {50 * (batch + 1)} launches, {time.time() - began:.1f} s", flush=True)
if "--graph" in sys.argv:   # then ten launches captured in a CUDA graph, as calls 1-3 timed them
    import kernel_configs as kc

    print(f"{variant}: graph {kc.graph_us(lambda: plan.run(a, b, launch.values, None, 1), 10):.1f} us",
          flush=True)
print(f"{variant}: done", flush=True)
