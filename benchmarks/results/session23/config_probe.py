"""Twenty-third session: the heuristic's configuration against every candidate, for the fused GEMMs
that cost most over their bare GEMM in GPT-2's and BERT's steps (H200, bf16). µs per launch from
CUDA graphs of 10 launches (median of 5 replays); cuBLAS's bare GEMM of the same shape beside.
  ce_forward    GPT-2's LM head block: 10624 x 50257 x 768, logits stored (rows padded to 50272),
                lse and the target logit summed per row
  fc1_gelu      GPT-2's fc1: 16384 x 3072 x 768, bias, tanh GELU, its slope saved
  fc1_gelu_erf  BERT's fc1: the same with the erf GELU
  dh_slope      the dh GEMM: 16384 x 3072 x 768 (dy @ w2), times the saved slope, bias gradient
Writes $OUT/config_probe.json."""

import importlib
import json
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from kernel_configs import graph_us  # benchmarks/kernel_configs.py

from coda.codegen import tuning

# coda.ops exports functions of these names: the modules by their full names
cross_entropy = importlib.import_module("coda.ops.cross_entropy")
linear = importlib.import_module("coda.ops.linear")

REPS = 10



def main() -> None:
    torch.manual_seed(0)
    dt, dev = torch.bfloat16, "cuda"
    m, v, h = 10624, 50257, 768
    x, w = torch.randn(m, h, device=dev, dtype=dt), torch.randn(v, h, device=dev, dtype=dt) * h ** -0.5
    logits = torch.empty(m * 50272, device=dev, dtype=dt).view(m, 50272)[:, :v]
    target = torch.randint(v, (m,), device=dev).float()
    tokens, hidden, ffn = 16384, 768, 3072
    a = torch.randn(tokens, hidden, device=dev, dtype=dt)
    w1 = torch.randn(ffn, hidden, device=dev, dtype=dt) * hidden ** -0.5
    b1 = torch.randn(ffn, device=dev, dtype=dt)
    w2 = torch.randn(hidden, ffn, device=dev, dtype=dt) * ffn ** -0.5
    slope = torch.rand(tokens, ffn, device=dev, dtype=dt)
    cases = {
        "ce_forward": (cross_entropy.forward_program(False, False, False), x, w.T,
                       dict(out=logits, outputs=["output", "lse", "t"], target=target, offset=0.0),
                       lambda: torch.matmul(x, w.T)),
        "fc1_gelu": (linear.forward_program("gelu", True, False, False, True), a, w1.T, dict(bias=b1),
                     lambda: torch.matmul(a, w1.T)),
        "fc1_gelu_erf": (linear.forward_program("gelu_erf", True, False, False, True), a, w1.T, dict(bias=b1),
                         lambda: torch.matmul(a, w1.T)),
        "dh_slope": (linear.backward_program("gelu", False, True), a, w2, dict(slope=slope),
                     lambda: torch.matmul(a, w2)),
    }
    results = {"gpu": torch.cuda.get_device_name(), "cases": {}}
    for name, (prog, left, right, values, cublas) in cases.items():
        launch = prog.bind(left, right, seed=1, **values)
        heuristic = tuning.heuristic("hopper", launch.m, launch.n, launch.k, True, prog.triton.packs)
        row = results["cases"][name] = {"shape": [launch.m, launch.n, launch.k], "heuristic": str(heuristic),
                                        "cublas": graph_us(cublas, REPS), "configs": {}}
        configs = tuning.CANDIDATES["hopper"] if name == "ce_forward" else [
            c for c in tuning.CANDIDATES["hopper"] if c.pingpong or c.split_epilogue == 2 or c.block_n == 128]
        for config in configs:
            try:
                plan, _ = prog.triton.start(launch, config)
            except Exception as exc:   # a configuration that does not fit
                row["configs"][str(config)] = repr(exc)[:100]
                continue
            row["configs"][str(config)] = graph_us(
                lambda p=plan: p.run(launch.a, launch.b, launch.values, launch.out, launch.seed), REPS)
            print(name, config, row["configs"][str(config)], flush=True)
        timed = {c: t for c, t in row["configs"].items() if isinstance(t, float)}
        best = min(timed, key=timed.get)
        print(f"== {name}: cuBLAS {row['cublas']:.1f}, heuristic {timed.get(str(heuristic))}, best {best} "
              f"{timed[best]:.1f}", flush=True)
    with open(os.path.join(os.environ.get("OUT", "."), "config_probe.json"), "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
