"""Do fewer A/B bytes a FLOP pay for epilogues that no longer overlap the MMAs?

`Config.pair_rows`: the ping-pong kernel's two warpgroups take the two row halves of one
256 x 128 tile at the same time, so each B tile is fetched once for both (a quarter fewer A/B
bytes through L2 a FLOP than two 128 x 128 tiles), and their epilogues run together while the
loader fills the ring for the next tile. The sixty-first session found (c)'s warps at K = 768
waiting for A and B tiles. First every case's outputs against the ping-pong kernel's (ragged M,
an odd number of row blocks), then each case at each shape in the ping-pong configuration and
the paired ones, over CODA's plain ping-pong GEMM, CUDA events, rounds in alternating order.

    CODA_AUTOTUNE=0 PYTHONPATH=src python benchmarks/results/session62/paired_probe.py --json out.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "session57"))
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
import ablation_probe as ap
import gemm

import coda
from coda.codegen.tuning import Config

CONFIGS = {"pp": Config(128, 128, 64, 4, 4, split_epilogue=2, pingpong=True),
           "pair_s3": Config(128, 128, 64, 4, 3, split_epilogue=2, pingpong=True, pair_rows=True),
           "pair_s4": Config(128, 128, 64, 4, 4, split_epilogue=2, pingpong=True, pair_rows=True),
           "pair_k32s6": Config(128, 128, 32, 4, 6, split_epilogue=2, pingpong=True, pair_rows=True)}
CASES = ["plain", "bias_gelu", "bias_gelu_dropout_residual", "residual_rowsumsq", "rowscale_swiglu",
         "dgelu_bias_grad"]


def plans(m: int, n: int, k: int) -> tuple[dict, dict]:
    """{case/config: a call running it}, {case/config: its outputs' first run}."""
    a, w, ops = gemm.inputs(m, n, k)
    run, outputs = {}, {}
    for case in CASES:
        prog = coda.compile(gemm.CASES[case]["coda"])
        launch = prog.bind(a, w.T, seed=1, **gemm.used_operands(prog, ops))
        for label, config in CONFIGS.items():
            try:
                plan = prog.triton.plan(launch, config)
                outputs[f"{case}/{label}"] = {name: t.clone() for name, t in
                                              plan.run(a, w.T, launch.values, None, 1).items()}
            except Exception as error:  # a ring and buffers past shared memory
                print(f"{m}x{n}x{k} {case}/{label}: {type(error).__name__}: {str(error)[:200]}", flush=True)
                continue
            run[f"{case}/{label}"] = lambda p=plan, v=launch.values: p.run(a, w.T, v, None, 1)
    torch.cuda.synchronize()
    return run, outputs


def differences(outputs: dict) -> dict:
    """Each paired configuration's largest |difference| from the ping-pong kernel's outputs."""
    diffs = {}
    for key, outs in outputs.items():
        case, _, label = key.partition("/")
        base = outputs.get(f"{case}/pp")
        if label != "pp" and base is not None:
            diffs[key] = {name: (t.float() - base[name].float()).abs().max().item()
                          for name, t in outs.items()}
    return diffs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", default="16384x3072x768,16384x768x3072,16384x8192x2048,4096x4096x4096")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json")
    args = parser.parse_args()
    result = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, command=" ".join(sys.argv))
    _, outputs = plans(1000 + 128 * 3, 768, 768)   # 1384 rows: 11 row blocks, the last ragged
    result["differences"] = differences(outputs)
    print(json.dumps(result["differences"]), flush=True)
    result["shapes"] = {}
    for shape in args.shapes.split(","):
        m, n, k = (int(x) for x in shape.split("x"))
        run, outputs = plans(m, n, k)
        diffs = differences(outputs)
        del outputs
        us, times = ap.timed_rounds(run, args.rounds, ap.event_us)
        print(shape, json.dumps(us), flush=True)
        result["shapes"][shape] = dict(us=us, us_rounds=times, differences=diffs)
        if args.json:
            Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
