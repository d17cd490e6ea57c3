"""Where the host's time goes in a CODA training step without a CUDA graph: GPT-2 and BERT
(`coda` mode) issue their steps in 40-45 ms against 27 and 22 ms of GPU time (host_rounds.py),
so the host sets their rate. cProfile over 5 steps after a warm-up; the 45 functions with the most
time of their own and the 45 with the most time below them.
Run: python benchmarks/results/session40/host_profile.py"""

import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from host_rounds import coda_step


def profile(name: str, steps: int = 5) -> None:
    step, _ = coda_step(name)
    for _ in range(5):
        step()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    print(f"{name}: {1e3 * (time.perf_counter() - start) / steps:.1f} ms a step unprofiled", flush=True)
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    profiler.disable()
    for key in ("tottime", "cumulative"):
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats(key).print_stats(45)
        print(f"== {name}, by {key} (5 steps)\n" + text.getvalue(), flush=True)


if __name__ == "__main__":
    for model_name in ("gpt2", "bert"):
        profile(model_name)
