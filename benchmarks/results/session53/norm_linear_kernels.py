"""The norm-folded linears' fwd+bwd kernel by kernel (no CUDA graph: the graph probe's eager
replay faulted at LLaMA-1B size, call 3), eager / torch.compile / CODA, and for CODA the PyTorch
ops that launched GPU work (a `memcpy128` kernel of 12.5 us appeared in CODA's step only).

    python benchmarks/results/session53/norm_linear_kernels.py [--cases op:size,...]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "benchmarks"))
import micro  # noqa: E402
import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cases",
                        default="rms_norm_linear:gpt2,layer_norm_linear:gpt2,layer_norm_linear:llama7b")
    args = parser.parse_args()
    for case_name in args.cases.split(","):
        op, size = case_name.split(":")
        case, impls, _ = micro.prepare(op, size, False, ["default"])
        for impl in ("eager", "compile", "coda"):
            step = micro.fwd_bwd(impls[impl], case.grads_of)
            for _ in range(3):
                step()
            torch.cuda.synchronize()
            activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
            with profile(activities=activities, record_shapes=True) as prof:
                step()
                torch.cuda.synchronize()
            kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
            total = sum(e.device_time for e in kernels)
            print(f"\n== {op} {size} {impl}: {total:.1f} us in {len(kernels)} kernels")
            for e in sorted(kernels, key=lambda e: -e.device_time):
                print(f"     {e.device_time:8.1f} us  {e.name[:100]}")
            if impl == "coda":
                print(prof.key_averages(group_by_input_shape=True).table(
                    sort_by="self_device_time_total", row_limit=18, max_name_column_width=60))
        del case, impls
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
