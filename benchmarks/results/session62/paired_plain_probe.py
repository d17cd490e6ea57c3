"""The plain GEMM with `Config.pair_rows` (paired_probe.py) against CODA's heuristic choice,
the ping-pong configuration and cuBLAS, at GPT-2's, LLaMA-492M's and issue 8's shapes: where
does sharing B between the warpgroups pay? CUDA events, rounds in alternating order.

    CODA_AUTOTUNE=0 PYTHONPATH=src python benchmarks/results/session62/paired_plain_probe.py --json out.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "session57"))
import ablation_probe as ap
from paired_probe import CONFIGS

from coda.codegen import tuning
from coda.ops.common import PLAIN

SHAPES = ("16384x768x3072,16384x2304x768,16384x768x768,"            # GPT-2: fc2, qkv, proj
          "16384x3072x2048,16384x2048x2048,16384x11264x2048,16384x2048x5632,16384x2048x11264,"  # LLaMA
          "8192x11008x4096,8192x4096x11008,8192x8192x8192,4096x4096x4096")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", default=SHAPES)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json")
    args = parser.parse_args()
    result = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, command=" ".join(sys.argv),
                  shapes={})
    for shape in args.shapes.split(","):
        m, n, k = (int(x) for x in shape.split("x"))
        torch.manual_seed(0)
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k**0.5
        launch = PLAIN.bind(a, w.T)
        configs = {"heuristic": tuning.heuristic("hopper", m, n, k)} | {
            label: CONFIGS[label] for label in ("pp", "pair_s4")}
        run, outputs = {"cublas": lambda: a @ w.T}, {}
        for label, config in configs.items():
            plan = PLAIN.triton.plan(launch, config)
            outputs[label] = plan.run(a, w.T, {}, None, 0)["output"]
            run[label] = lambda p=plan: p.run(a, w.T, {}, None, 0)
        diff = (outputs["pair_s4"].float() - outputs["pp"].float()).abs().max().item()
        del outputs
        us, times = ap.timed_rounds(run, args.rounds, ap.event_us)
        print(shape, json.dumps(us), f"pair - pp: {diff}", flush=True)
        result["shapes"][shape] = dict(us=us, us_rounds=times, pair_minus_pp=diff,
                                       heuristic=str(configs["heuristic"]))
        if args.json:
            Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
