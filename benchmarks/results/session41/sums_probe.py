"""Where GPT-2's ln_1 backward GEMM (dy @ w, 16384 x 768 x 2304, A = the q/k/v gradients in place,
the c_attn bias gradient from its K loop) and the out-projection's dx GEMM (16384 x 768 x 768 with
its bias gradient) lose time against cuBLAS: each launch with and without `a_col_sums`, from one
tensor and from a Concat, in the heuristic's configuration and the ping-pong kernel's (deeper
rings with the sums); cuBLAS and the column-sum map beside. µs from CUDA graphs
(kernel_configs.graph_us), five interleaved rounds, medians; then each launch's kernels by name
from the profiler (GEMM against finishing kernel).
    python benchmarks/results/session41/sums_probe.py"""

import statistics
import sys
from pathlib import Path

import torch

root = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(root / "src"), str(root / "benchmarks")]
from kernel_configs import graph_us  # noqa: E402

import coda  # noqa: E402
from coda.codegen.tuning import Config  # noqa: E402
from coda.ops.common import PLAIN, column_sum  # noqa: E402

PINGPONG = Config(128, 128, 64, 4, 4, split_epilogue=2, pingpong=True)
#: the heuristic's (None), the ping-pong kernel's default, and deeper rings (with the sums only;
#: a ring of 6 was dropped in the forty-second session: with the tensor cores' sums it exceeds
#: shared memory by the 2 KiB of their ones operand)
CONFIGS = {"heuristic": None, "pingpong": PINGPONG,
           "ring 5": Config(128, 128, 64, 4, 5, split_epilogue=2, pingpong=True),
           "ring 5, 4 slices": Config(128, 128, 64, 4, 5, split_epilogue=4, pingpong=True)}


def launches(m: int, k: int, n: int) -> dict:
    pieces = [torch.randn(m, k // 3, device="cuda", dtype=torch.bfloat16) for _ in range(3)]
    whole = torch.cat(pieces, 1)
    w = torch.randn(k, n, device="cuda", dtype=torch.bfloat16) * k**-0.5
    cat = coda.Concat(pieces, 1)
    cases = {}
    for a_name, a in (("tensor", whole), ("concat", cat)):
        for sums in (False, True):
            launch = PLAIN.bind(a, w, a_col_sums=sums)
            for cfg_name, config in CONFIGS.items():
                if config is not None and config is not PINGPONG and not sums:
                    continue
                kernel = PLAIN.triton.kernel(launch)
                plan = PLAIN.triton.plan(launch, config or PLAIN.triton.config(launch, kernel))
                cases[f"{a_name} sums={sums} {cfg_name}"] = (
                    lambda plan=plan, a=a, launch=launch: plan.run(a, w, launch.values, None, launch.seed,
                                                                   (None, None)))
    cases["cuBLAS"] = lambda: torch.matmul(whole, w)
    cases["column-sum map"] = lambda: column_sum(whole)
    cases["column-sum map (concat)"] = lambda: column_sum(cat)
    return cases


def kernels(fn) -> dict[str, float]:
    """µs per call of each kernel `fn` launches (20 calls under the profiler)."""
    from torch.profiler import ProfilerActivity, profile
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(20):
            fn()
        torch.cuda.synchronize()
    return {e.key[:60]: round(e.device_time_total / e.count, 1) for e in prof.key_averages()
            if e.device_time_total > 0}


def main() -> None:
    for m, k, n in ((16384, 2304, 768), (16384, 768, 768)):
        cases = launches(m, k, n)
        rounds = {name: [] for name in cases}
        for _ in range(5):
            for name, fn in cases.items():
                rounds[name].append(graph_us(fn, 20))
        print(f"\n{m}x{n}x{k}: µs a launch from CUDA graphs (median of 5 rounds); kernels from the profiler")
        for name, fn in cases.items():
            print(f"  {name:34s} {statistics.median(rounds[name]):7.1f}   {kernels(fn)}", flush=True)


if __name__ == "__main__":
    main()
