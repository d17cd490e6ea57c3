"""Twenty-seventh session: GPT-2's captured training step with each CODA GEMM launch in the
configuration that `kernel_configs.py gpt2` timed fastest for it, against the heuristic's.

    PYTHONPATH=$PWD/src python benchmarks/results/session27/config_probe.py --variant=best \
        --sweep=gpt2_configs.json [--json=out.json]

--variant: `heuristic` (CODA_AUTOTUNE=0 as is), `best` (each launch the sweep timed in its
fastest configuration, where that beat the heuristic's by more than 2%), `pingpong` (the
ping-pong kernel, 4-deep ring and 2 slices, for every launch it can run). One captured step a
process; prints and writes ms a step over 3 rounds of 10 replays, and one profiled replay: the
GPU span, the kernels' summed time and count, and each CODA GEMM kernel's summed time.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch

os.environ["CODA_AUTOTUNE"] = "0"
BENCHMARKS = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(BENCHMARKS))
from kernel_configs import GPT2_CONFIGS, config_label  # noqa: E402
from train import LR, SEED, SHAPES, build, model_inputs  # noqa: E402

import coda  # noqa: E402
from coda.codegen import tuning  # noqa: E402
from coda.codegen.kernel import TritonProgram  # noqa: E402
from coda.integrations.hf import unpadded_batches  # noqa: E402

REPLAYS, ROUNDS, MARGIN = 10, 3, 0.98
PINGPONG = tuning.Config(128, 128, 64, 4, 4, split_epilogue=2, pingpong=True)


def fastest(sweep: dict) -> dict[str, tuning.Config]:
    """case name -> the configuration timed fastest, where it beat the heuristic's by > 2%."""
    by_label = {config_label(c): c for c in GPT2_CONFIGS if c is not None}
    chosen = {}
    for row in sweep["rows"]:
        times = {label: us for label, us in row.items() if label in by_label and isinstance(us, float)}
        if times and isinstance(row.get("heuristic"), float):
            label = min(times, key=times.get)
            if times[label] < MARGIN * row["heuristic"]:
                chosen[row["case"]] = by_label[label]
    return chosen


def override(variant: str, sweep: dict | None) -> dict[str, str]:
    """Patch TritonProgram.config for the variant; returns what each launch was given."""
    given, configure = {}, TritonProgram.config
    best = fastest(sweep) if variant == "best" else {}

    def config(self, launch, kernel):
        name = f"{self.program.name}_{launch.m}x{launch.n}x{launch.k}"
        chosen = configure(self, launch, kernel)
        if kernel.variant != "map":
            if name in best:
                chosen = best[name]
            elif (variant == "pingpong" and self.pingpong and launch.m > 64
                  and launch.m_limit is None):
                chosen = PINGPONG
            given[name] = str(chosen)
        return chosen

    TritonProgram.config = config
    return given


def main() -> None:
    args = dict(a.split("=", 1) for a in sys.argv[1:] if "=" in a)
    variant = args.get("--variant", "heuristic")
    sweep = json.loads(Path(args["--sweep"]).read_text()) if "--sweep" in args else None
    given = override(variant, sweep)
    model = coda.patch(build("gpt2", False, torch.device("cuda"), torch.bfloat16))
    opt = torch.optim.AdamW(model.parameters(), lr=LR, fused=True, capturable=True)
    batch, seq = SHAPES["gpt2"]
    generator = torch.Generator().manual_seed(SEED)
    vocab = model.config.vocab_size
    inputs = model_inputs("gpt2", torch.randint(vocab, (batch, seq), generator=generator), vocab,
                          generator, torch.device("cuda"))

    def train_step(**batch_inputs):
        loss = model(**batch_inputs).loss
        loss.backward()
        opt.step()
        return loss

    step = coda.capture_step(train_step, opt, warmup=2, context=unpadded_batches, **inputs)
    rounds = []
    for _ in range(ROUNDS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(REPLAYS):
            loss = step(**inputs)
        end.record()
        torch.cuda.synchronize()
        rounds.append(start.elapsed_time(end) / REPLAYS)
    result = dict(variant=variant, ms_per_step=rounds, loss=loss.item(), given=given,
                  **profiled(step, inputs), device=torch.cuda.get_device_name())
    print(json.dumps({k: v for k, v in result.items() if k != "given"}), flush=True)
    if "--json" in args:
        Path(args["--json"]).write_text(json.dumps(result, indent=1))


def profiled(step, inputs) -> dict:
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step(**inputs)
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == DeviceType.CUDA and not e.is_user_annotation]
    gemms: dict[str, float] = {}
    for e in kernels:
        if e.name.startswith("coda_gemm"):
            gemms[e.name] = gemms.get(e.name, 0.0) + e.device_time_total
    return dict(span_us=max(e.time_range.end for e in kernels) - min(e.time_range.start for e in kernels),
                kernel_us=sum(e.device_time_total for e in kernels), kernels=len(kernels),
                coda_gemm_us={k: round(v, 1) for k, v in sorted(gemms.items())})


if __name__ == "__main__":
    main()
