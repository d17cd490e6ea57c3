"""Host cost of launching: where a CODA launch and op spend host time, next to torch.matmul and
eager PyTorch, at a real shape (GPU busy) and a tiny one (GPU idle).

    python benchmarks/launch_overhead.py

Each line: microseconds of host time per call, 30 calls back to back without synchronizing
(median of 5 rounds), so that the host is measured, not the GPU (unless the launch itself waits).
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

import side_by_side  # benchmarks/, beside this script
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from coda import ops
from coda.ops.linear import forward_program


def host_us(fn, calls: int = 30) -> float:
    fn()
    torch.cuda.synchronize()
    rounds = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        rounds.append((time.perf_counter() - start) / calls * 1e6)
        torch.cuda.synchronize()
    return statistics.median(rounds)


def gpu_us(fn) -> float:
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(10):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 100


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()   # --help
    side_by_side.require_gpu("benchmarks/launch_overhead.py")
    for label, (t, h, f) in {"gpt2 fc1": (16384, 768, 3072), "tiny": (128, 128, 128)}.items():
        x = torch.randn(t, h, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(f, h, device="cuda", dtype=torch.bfloat16) / h**0.5
        b = torch.randn(f, device="cuda", dtype=torch.bfloat16)
        prog = forward_program("gelu", True, False, False, False)
        cases = {
            "torch.matmul": lambda: torch.matmul(x, w.T),
            "F.linear + F.gelu (eager)": lambda: F.gelu(F.linear(x, w, b), approximate="tanh"),
            "coda program call": lambda: prog(x, w.T, bias=b),
            "ops.linear (no grad)": lambda: ops.linear(x, w, b, activation="gelu"),
            "torch.empty x3": lambda: [torch.empty(t, f, device="cuda", dtype=torch.bfloat16)
                                       for _ in range(3)],
        }
        wr = w.detach().requires_grad_()
        cases["ops.linear (grad)"] = lambda: ops.linear(x, wr, b, activation="gelu")
        cases["eager (grad)"] = lambda: F.gelu(F.linear(x, wr, b), approximate="tanh")
        print(f"--- {label} {t}x{f}x{h}", flush=True)
        for name, fn in cases.items():
            print(f"{name:28s} host {host_us(fn):8.1f} us   gpu {gpu_us(fn):8.1f} us", flush=True)
        # The launcher call alone, with the arguments of the last run (monkeypatched recorder):
        # CODA's direct launcher, and Triton's own per-call path to the same compiled kernel.
        plan = next(iter(prog._plans.values()))
        captured = {}
        launcher = plan.launcher

        def recording(*args):
            captured["args"] = args
            launcher(*args)
        plan.launcher = recording
        prog(x, w.T, bias=b)
        plan.launcher = launcher
        args = captured["args"]
        runner = plan.compiled[(*plan.grid, 1, 1)]
        print(f"{'direct launcher only':28s} host {host_us(lambda: launcher(*args)):8.1f} us", flush=True)
        print(f"{'Triton runner only':28s} host {host_us(lambda: runner(*args)):8.1f} us", flush=True)
        prog._plans.clear()


if __name__ == "__main__":
    main()
