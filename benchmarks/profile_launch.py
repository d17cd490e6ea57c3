"""Where the host time of CODA ops goes: per-step host time (launches only, no sync) and a
cProfile of forward+backward steps of the micro benchmark's cases.

    python benchmarks/profile_launch.py [--ops linear_gelu,layer_norm_linear] [--size gpt2]
"""

import argparse
import cProfile
import pstats

import side_by_side  # benchmarks/, beside this script
import torch
from launch_overhead import host_us
from micro import OPS, SIZES, fwd_bwd


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", default="linear_gelu,layer_norm_linear")
    parser.add_argument("--size", default="gpt2")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    side_by_side.require_gpu("benchmarks/profile_launch.py")
    for op in args.ops.split(","):
        case = OPS[op](SIZES[args.size], False)
        for impl in ("eager", "coda"):
            print(f"{op} {impl}: host {host_us(fwd_bwd(case.impls[impl], case.grads_of)):.1f} us "
                  f"per fwd+bwd", flush=True)
        step = fwd_bwd(case.impls["coda"], case.grads_of)
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(20):
            step()
        profiler.disable()
        torch.cuda.synchronize()
        for order in ("tottime", "cumulative"):   # own time, then time including callees
            pstats.Stats(profiler).sort_stats(order).print_stats(args.top)


if __name__ == "__main__":
    main()
