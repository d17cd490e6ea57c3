"""Twenty-fifth session: where the host time of a CODA op's forward + backward goes at GPT-2's size.

    python benchmarks/results/session25/host_probe.py [op ...]

The micro suite's cases (benchmarks/micro.py, GPT-2 size, bf16): for each op, CODA's fwd+bwd as
the suite runs it. Prints the host µs a step (30 steps back to back, not synchronized: the host
is the limit at this size) against the GPU µs of one step, and cProfile's top functions over 30
steps (by own time and by cumulative time). Writes $OUT/host_<op>.txt.
"""

import cProfile
import io
import os
import pstats
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import micro  # benchmarks/micro.py

OPS = ["layer_norm_linear", "out_proj_residual", "qkv_rope", "rms_norm_linear", "linear_gelu"]
STEPS = 30


def host_us(step) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(STEPS):
        step()
    host = (time.perf_counter() - start) / STEPS * 1e6
    torch.cuda.synchronize()
    return host


def gpu_us(step) -> float:
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    step()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3


def probe(op: str) -> str:
    case = micro.OPS[op](micro.SIZES["gpt2"], False)
    lines = [f"# {op} at GPT-2's size, fwd+bwd"]
    for impl in ("coda", "eager"):
        step = micro.fwd_bwd(case.impls[impl], case.grads_of)
        for _ in range(3):
            step()
        lines.append(f"{impl}: host {min(host_us(step) for _ in range(3)):.1f} us a step (unsynchronized), "
                     f"one step alone {gpu_us(step):.1f} us")
    step = micro.fwd_bwd(case.impls["coda"], case.grads_of)
    step()
    profiler = cProfile.Profile()
    torch.cuda.synchronize()
    profiler.enable()
    for _ in range(STEPS):
        step()
    profiler.disable()
    torch.cuda.synchronize()
    for key in ("tottime", "cumtime"):
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats(key).print_stats(45)
        lines += [f"## by {key}", text.getvalue()]
    return "\n".join(lines)


def main() -> None:
    out = Path(os.environ.get("OUT", "."))
    for op in sys.argv[1:] or OPS:
        text = probe(op)
        (out / f"host_{op}.txt").write_text(text)
        print("\n".join(text.splitlines()[:3]), flush=True)


if __name__ == "__main__":
    main()
