"""Eighteenth session: the ping-pong kernel's cost of each epilogue stage, one added at a time.

    python stages_probe.py --json out.json

Each program runs in the configuration CODA picks (heuristic, no autotuning) and is timed back to
back with the plain GEMM in its own pick (benchmarks/gemm.py's paired_ratios), at a short-K
and a long-K shape: the ratios say what each stage of the fast-path epilogues costs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from gemm import P, paired_ratios

import coda

SHAPES = [(16384, 3072, 768), (16384, 8192, 2048)]
STAGES = {
    "plain": "output = input;",
    "bias": "EPILOGUE(bias: col) { output = input + bias; }",
    "gelu": "output = gelu(input);",
    "bias_gelu": "EPILOGUE(bias: col) { output = gelu(input + bias); }",
    "dropout": "EPILOGUE(p: scalar) { output = dropout(input, p); }",
    "bias_gelu_dropout": "EPILOGUE(bias: col, p: scalar) { output = dropout(gelu(input + bias), p); }",
    "residual": "EPILOGUE(residual: tile) { output = input + residual; }",
    "bias_gelu_residual": "EPILOGUE(bias: col, residual: tile) { output = gelu(input + bias) + residual; }",
    "bias_gelu_dropout_residual": "EPILOGUE(bias: col, residual: tile, p: scalar) "
                                  "{ output = dropout(gelu(input + bias), p) + residual; }",
    "rowsumsq": "output = input; ss = row_sum(input * input);",
    "residual_rowsumsq": "EPILOGUE(residual: tile) { output = input + residual;"
                         " ss = row_sum(output * output); }",
    "dgelu": "EPILOGUE(pre: tile) { output = input * gelu_grad(pre); }",
    "colsum": "output = input; db = col_sum(input);",
    "dgelu_bias_grad": "EPILOGUE(pre: tile) { output = input * gelu_grad(pre); db = col_sum(output); }",
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", required=True)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    rows = []
    for m, n, k in SHAPES:
        torch.manual_seed(0)
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k**0.5
        values = {"bias": torch.randn(n, device="cuda", dtype=torch.bfloat16),
                  "residual": torch.randn(m, n, device="cuda", dtype=torch.bfloat16),
                  "pre": torch.randn(m, n, device="cuda", dtype=torch.bfloat16), "p": P}
        runs = {}
        for name, text in STAGES.items():
            prog = coda.compile(text)
            launch = prog.bind(a, w.T, seed=1, **{p: v for p, v in values.items() if p in prog.ir.params})
            plan, _ = prog.triton.start(launch)
            config = plan.config
            runs[name] = (lambda plan=plan, launch=launch:
                          plan.run(launch.a, launch.b, launch.values, None, launch.seed))
            runs[name]()
            torch.cuda.synchronize()
            if name == "plain":
                continue
            ratios = paired_ratios(runs[name], runs["plain"], args.rounds)
            rows.append(dict(shape=[m, n, k], program=name, config=str(config),
                             ratio=statistics.median(ratios), ratios=ratios))
            print(f"{m}x{n}x{k} {name:28s} {statistics.median(ratios):.3f}  "
                  f"({min(ratios):.3f}-{max(ratios):.3f})  {config}", flush=True)
    Path(args.json).write_text(json.dumps(dict(gpu=torch.cuda.get_device_name(), rows=rows), indent=1))


if __name__ == "__main__":
    main()
