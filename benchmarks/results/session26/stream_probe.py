"""Twenty-sixth session: a CODA-patched model's captured training step with its parameter
gradients on a second stream (CODA_SIDE_STREAM=graph, the default) and without (=0), two
captures of two identical models in one process, replayed alternately on the same batch.

    PYTHONPATH=$PWD/src python benchmarks/results/session26/stream_probe.py gpt2 bert llama

(`--eager`: the models unpatched; `--reverse`: the checked first replays in reverse order;
`--block-logits=N`: the cross-entropy's blocks of about 2**N logits, coda.ops.cross_entropy.BLOCK_LOGITS.)

Prints and writes (--json) ms a step per round, and per variant one profiled replay: the GPU
span (first kernel's start to last kernel's end), the kernels' summed time and their count.
The losses of the two variants, replay by replay, must be equal (they train the same weights
on the same batch with the same kernels).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))   # benchmarks/
from train import LR, SEED, SHAPES, build, model_inputs

import coda
from coda.integrations.hf import unpadded_batches

VARIANTS = {"one stream": "0", "side stream": "graph"}
REPLAYS, ROUNDS = 10, 3


def captured(name: str, mode: str):
    os.environ["CODA_SIDE_STREAM"] = mode
    model = build(name, False, torch.device("cuda"), torch.bfloat16)
    if "--eager" not in sys.argv:
        model = coda.patch(model)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, fused=True, capturable=True)
    batch, seq = SHAPES[name]
    generator = torch.Generator().manual_seed(SEED)
    vocab = model.config.vocab_size
    inputs = model_inputs(name, torch.randint(vocab, (batch, seq), generator=generator), vocab,
                          generator, torch.device("cuda"))

    def train_step(**batch_inputs):
        loss = model(**batch_inputs).loss
        loss.backward()
        opt.step()
        return loss

    step = coda.capture_step(train_step, opt, warmup=2, context=unpadded_batches, **inputs)
    print(f"captured {name} with CODA_SIDE_STREAM={mode}", flush=True)
    return step, inputs


def profiled(step, inputs) -> dict:
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step(**inputs)
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == DeviceType.CUDA and not e.is_user_annotation]
    start = min(e.time_range.start for e in kernels)
    end = max(e.time_range.end for e in kernels)
    return dict(span_us=end - start, kernel_us=sum(e.device_time_total for e in kernels),
                kernels=len(kernels))


def main() -> None:
    names = [a for a in sys.argv[1:] if not a.startswith("--")]
    out = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--json=")), None)
    modes = next((a.split("=", 1)[1].split(",") for a in sys.argv[1:] if a.startswith("--modes=")), None)
    # --modes=0,graph: the variants to capture (one graph each), default both of VARIANTS
    variants = {f"{i}: CODA_SIDE_STREAM={m}": m for i, m in enumerate(modes)} if modes else VARIANTS
    block = next((int(a.split("=", 1)[1]) for a in sys.argv[1:] if a.startswith("--block-logits=")), None)
    if block:
        import coda.ops.cross_entropy as ce
        ce.BLOCK_LOGITS = 1 << block
    results = {}
    for name in names:
        steps = {v: captured(name, mode) for v, mode in variants.items()}
        order = list(steps.items())[::-1] if "--reverse" in sys.argv else steps.items()
        for v, (step, inputs) in order:
            step(**inputs)
            torch.cuda.synchronize()
            print(f"replayed {name}, {v}", flush=True)
        times = {v: [] for v in variants}
        losses = {v: [] for v in variants}
        for _ in range(ROUNDS):
            for v, (step, inputs) in steps.items():
                torch.cuda.synchronize()
                begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                begin.record()
                for _ in range(REPLAYS):
                    losses[v].append(step(**inputs))
                end.record()
                torch.cuda.synchronize()
                times[v].append(begin.elapsed_time(end) / REPLAYS)
        print(f"timed {name}: {times}", flush=True)
        same = [len({float(x) for x in row}) == 1 for row in zip(*losses.values(), strict=True)]
        tokens = SHAPES[name][0] * SHAPES[name][1]
        results[name] = {v: dict(ms=times[v], median_ms=statistics.median(times[v]),
                                 tokens_per_s=tokens / statistics.median(times[v]) * 1e3,
                                 profile=profiled(*steps[v])) for v in variants}
        results[name]["losses_equal"] = all(same)
        results[name]["first_losses"] = {v: [float(x) for x in losses[v][:3]] for v in variants}
        print(name, json.dumps(results[name]), flush=True)
        del steps
        torch.cuda.empty_cache()
    if out:
        Path(out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
