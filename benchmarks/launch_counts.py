"""Kernel launches per op, forward + backward: CODA against the unfused eager formula.

    python benchmarks/launch_counts.py [--groups norms] [--json benchmarks/results/launch_counts.json]

Each `tests/gpu/test_ops_*.py` that defines `launch_count_cases()` (the embedding's does not)
gives (name, coda_fn, eager_fn) closures that run one forward and backward on CUDA bf16 tensors.
Each closure runs once to warm up (compilation, tuning), then once under the PyTorch profiler,
which counts the CUDA kernels.
Each module runs in its own process, all of them at once (benchmarks/side_by_side.py; one at a
time where CODA autotunes).
"""

import argparse
import importlib.util
import json
import sys
from pathlib import Path

import side_by_side  # benchmarks/, beside this script
import torch
from torch.profiler import ProfilerActivity, profile

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests" / "gpu"))  # the test modules import accuracy.py

def kernels(fn) -> int:
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
               and not e.name.startswith(("Memcpy", "Memset")))


def module_rows(path: Path) -> list[dict]:
    """The counts of one tests/gpu/test_ops_*.py module's cases."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return [dict(op=name, coda=kernels(coda_fn), eager=kernels(eager_fn))
            for name, coda_fn, eager_fn in module.launch_count_cases()]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", default="benchmarks/results/launch_counts.json")
    parser.add_argument("--groups", default="*", help="which tests/gpu/test_ops_<groups>.py (a glob)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per module's process")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)   # a module: report its rows
    args = parser.parse_args()
    if args.child:
        return side_by_side.report(module_rows(args.child))
    side_by_side.require_gpu(f"benchmarks/{Path(__file__).name}")
    # one process per module, all at once: most of the time is compilation
    paths = [path for path in sorted((ROOT / "tests" / "gpu").glob(f"test_ops_{args.groups}.py"))
             if "def launch_count_cases(" in path.read_text()]
    commands = [[sys.executable, __file__, "--child", str(path)] for path in paths]
    rows = []
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    for path, turn in zip(paths, side_by_side.turns(commands, len(paths), args.timeout), strict=True):
        if turn.result is None:
            print(f"{path.name}: {turn.error}\n{turn.log}", file=sys.stderr, flush=True)
        for row in turn.result or []:
            print(f"{row['op']:40s} CODA {row['coda']:3d} kernels   eager {row['eager']:3d}", flush=True)
        rows += turn.result or []
        # after every module: a run cut short by run_all.sh's time limit keeps what it counted
        Path(args.json).write_text(json.dumps(dict(gpu=torch.cuda.get_device_name(), rows=rows), indent=1))


if __name__ == "__main__":
    main()
