"""Where the host time of a cache-hit launch goes (cProfile over many calls).

    python benchmarks/profile_launch.py
"""

import cProfile
import pstats
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
import coda

a = torch.randn(128, 128, device="cuda", dtype=torch.bfloat16)
w = torch.randn(128, 128, device="cuda", dtype=torch.bfloat16)
prog = coda.compile("output = input;")
for _ in range(100):
    prog(a, w.T)
torch.cuda.synchronize()
profiler = cProfile.Profile()
profiler.enable()
for _ in range(2000):
    prog(a, w.T)
torch.cuda.synchronize()
profiler.disable()
pstats.Stats(profiler).sort_stats("tottime").print_stats(14)
