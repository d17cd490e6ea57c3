"""Does CODA's heuristic leave speed on the table at LLaMA-492M's GEMM shapes? Every Hopper
tuning candidate for the plain GEMM (and for (d), row scale + SwiGLU, at the gate-and-up shape),
beside cuBLAS and the heuristic's choice; CUDA events, rounds in alternating order, medians.

    CODA_AUTOTUNE=0 PYTHONPATH=src python benchmarks/results/session62/config_sweep.py --json out.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from triton.runtime.errors import OutOfResources

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "session57"))
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
import ablation_probe as ap
import gemm

import coda
from coda.codegen import tuning

SHAPES = "16384x11264x2048,16384x2048x5632,16384x2048x2048,16384x3072x2048,16384x2048x11264"


def label(config: tuning.Config) -> str:
    flags = "".join(f" {name}" for name in ("pingpong", "share_tiles") if getattr(config, name))
    return (f"{config.block_m}x{config.block_n}x{config.block_k} w{config.num_warps} s{config.num_stages} "
            f"g{config.group_m} e{config.split_epilogue}{'' if config.flatten else ' noflat'}{flags}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", default=SHAPES)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json")
    args = parser.parse_args()
    result = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, command=" ".join(sys.argv),
                  shapes={})
    for shape in args.shapes.split(","):
        m, n, k = (int(x) for x in shape.split("x"))
        a, w, ops = gemm.inputs(m, n, k)
        run = {"cublas": lambda a=a, w=w: a @ w.T}
        cases = ["plain"] + ["rowscale_swiglu"] * (n == 11264)
        heuristic = tuning.heuristic("hopper", m, n, k)
        for case in cases:
            prog = coda.compile(gemm.CASES[case]["coda"])
            launch = prog.bind(a, w.T, seed=1, **gemm.used_operands(prog, ops))
            for config in tuning.CANDIDATES["hopper"]:
                try:
                    plan = prog.triton.plan(launch, config)
                    plan.run(a, w.T, launch.values, None, 1)
                except OutOfResources:
                    continue
                name = f"{case}/{label(config)}{' (heuristic)' if config == heuristic else ''}"
                run[name] = lambda p=plan, v=launch.values: p.run(a, w.T, v, None, 1)
        torch.cuda.synchronize()
        us, times = ap.timed_rounds(run, args.rounds, ap.event_us)
        best = {case: min((t, key) for key, t in us.items() if key.startswith(case + "/")) for case in cases}
        print(shape, "cublas", us["cublas"], json.dumps(best), flush=True)
        result["shapes"][shape] = dict(us=us, us_rounds=times, heuristic=label(heuristic))
        if args.json:
            Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
