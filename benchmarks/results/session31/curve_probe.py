"""GPT-2's 200-step loss curve (train.py's `curve`: KJV bytes, seed 0, 16×1024, bf16) with every
run on PyTorch's math attention, deterministic, so that only the head's path differs: eager, CODA
with the LM head's exponential path, and CODA with the general path (`Blocks.exponential`
patched to True and to False). Prints the mean of each run's last 20 losses and the largest gap to eager's.

    PYTHONPATH=src python benchmarks/results/session31/curve_probe.py [--steps 200] [--stop 20]
        [--seeds 0,1] [--runs eager,eager_fused,coda_exp,coda_general] [--json out]

A run whose label holds "f32head" (eager_f32head) computes the LM head's logits in float32.
A run whose label holds "fused" keeps PyTorch's fused attention kernels (eager_fused: eager
rounded differently, the noise a correct bf16 run shows against eager on math attention).
`--stop` ends every run after that many steps of the `--steps`-step schedule.

Each run is `train.curve_losses(..., math=True)`. (Call 7 of the thirty-first session ran this
script's first form, the same loop written out here, before --seeds and --runs existed: seed 0,
the four runs of the default --runs, results keyed by run alone.)
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import train

from coda.ops import cross_entropy


def float32_head(model: torch.nn.Module, mode: str) -> torch.nn.Module:
    """train.prepare for eager runs whose LM head multiplies in float32 (logits never rounded to
    bf16): a more exact reference than eager bf16, which rounds every logit before the softmax."""
    head = model.lm_head
    head.forward = lambda x: torch.nn.functional.linear(x.float(), head.weight.float())
    return model


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--stop", type=int, default=0, help="run only this many of the steps")
    parser.add_argument("--seeds", default="0", help="comma-separated: weights and batches")
    parser.add_argument("--runs", default="eager,coda_exp,coda_general,coda_exp_again")
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    data = train.load_corpus()
    exponential, prepare = cross_entropy.Blocks.exponential, train.prepare
    results = {}   # the HF patch takes no `exponential=`: the path is forced (GPT-2's head is open to it)
    for seed in map(int, args.seeds.split(",")):
        for label in args.runs.split(","):
            cross_entropy.Blocks.exponential = lambda self, exp="exp" in label: exp
            train.prepare = float32_head if "f32head" in label else prepare
            start = time.perf_counter()
            losses = results[f"{label}_seed{seed}"] = train.curve_losses(
                "gpt2", label.split("_")[0], args.stop or args.steps, data, torch.device("cuda"),
                torch.bfloat16, math="fused" not in label, seed=seed, schedule_steps=args.steps)
            eager = results.get(f"eager_seed{seed}", losses)
            gap = max(abs(a - b) for a, b in zip(losses, eager, strict=True))
            print(f"seed {seed} {label:15s} last-20 mean {statistics.mean(losses[-20:]):.4f}  last "
                  f"{losses[-1]:.4f}  max gap to eager {gap:.4f}  ({time.perf_counter() - start:.0f} s)",
                  flush=True)
    cross_entropy.Blocks.exponential, train.prepare = exponential, prepare
    if args.json:
        Path(args.json).write_text(json.dumps(results))


if __name__ == "__main__":
    main()
