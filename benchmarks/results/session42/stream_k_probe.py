"""Stream-K (Config(stream_k=True), the forty-second session's opt-in Triton mainloop) at the
weight gradients of a GPT-2 step (dyᵀ @ x, K = 16384 tokens: 18-144 tiles for 132 SMs), against
the heuristic's launch and cuBLAS (`torch.matmul`, which runs split-K and a `splitKreduce` kernel
there). µs a launch from CUDA graphs (kernel_configs.graph_us), five interleaved rounds, medians;
first each stream-K launch against the heuristic's output (largest relative difference).
    python benchmarks/results/session42/stream_k_probe.py"""

import statistics
import sys
from pathlib import Path

import torch

root = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(root / "src"), str(root / "benchmarks")]
from kernel_configs import graph_us  # noqa: E402

from coda.codegen.tuning import Config  # noqa: E402
from coda.ops.common import PLAIN  # noqa: E402
from coda.ops.norms import LN_DW  # noqa: E402

CONFIGS = {"stream-K 128x128": Config(128, 128, 64, 8, 4, stream_k=True),
           "stream-K 128x256": Config(128, 256, 64, 8, 3, split_epilogue=2, stream_k=True)}
TOKENS = 16384


def launches() -> dict:
    bf16 = dict(device="cuda", dtype=torch.bfloat16)
    cases = {}
    widths = {"fc1 dW": (3072, 768), "fc2 dW": (768, 3072), "c_proj dW": (768, 768)}
    for name, (n_out, n_in) in widths.items():
        dy, x = torch.randn(TOKENS, n_out, **bf16), torch.randn(TOKENS, n_in, **bf16) / TOKENS**0.5
        cases[name] = (PLAIN.bind(dy.T, x), lambda dy=dy, x=x: torch.matmul(dy.T, x))
    dy, xhat = torch.randn(TOKENS, 2304, **bf16), torch.randn(TOKENS, 768, **bf16) / TOKENS**0.5
    cases["c_attn ln_dw"] = (LN_DW.bind(dy.T, xhat, g=torch.randn(768, **bf16), beta=torch.randn(768, **bf16),
                                        db=torch.randn(2304, **bf16), w=torch.randn(2304, 768, **bf16)),
                             lambda: torch.matmul(dy.T, xhat))
    return cases


def main() -> None:
    runs = {}
    for name, (launch, cublas) in launches().items():
        prog = launch.program.triton
        heuristic = prog.plan(launch, prog.config(launch, prog.kernel(launch)))
        plans = {"heuristic": heuristic} | {label: prog.plan(launch, c) for label, c in CONFIGS.items()}
        for label, plan in plans.items():
            runs[f"{name}: {label}"] = (lambda plan=plan, launch=launch: plan.run(
                launch.a, launch.b, launch.values, None, launch.seed))
        runs[f"{name}: cuBLAS matmul"] = cublas
        want = runs[f"{name}: heuristic"]()
        for label in CONFIGS:
            got = runs[f"{name}: {label}"]()
            diff = max(((got[k].float() - want[k].float()).norm() / want[k].float().norm()).item()
                       for k in want)
            print(f"{name}: {label} against the heuristic's: relative difference {diff:.2e}", flush=True)
    rounds = {label: [] for label in runs}
    for _ in range(5):
        for label, fn in runs.items():
            rounds[label].append(graph_us(fn, 20))
    print("\nµs a launch from CUDA graphs (median of 5 rounds)")
    for label in runs:
        print(f"  {label:36s} {statistics.median(rounds[label]):8.1f}", flush=True)


if __name__ == "__main__":
    main()
