"""Where a captured GPT-2 step's GPU time goes between kernels: one replay under torch.profiler,
every kernel in order (start, duration), the idle time between consecutive kernels, and the
longest gaps with the kernels around them.

    python benchmarks/results/session29/timeline_probe.py [--model gpt2] [--json timeline.json]
"""

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))   # benchmarks/
import train

import coda
from coda.integrations.hf import unpadded_batches


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="gpt2", choices=train.MODELS)
    parser.add_argument("--mode", default="coda", choices=("coda", "eager"))
    parser.add_argument("--json", default="timeline.json")
    args = parser.parse_args()
    device = torch.device("cuda")
    model = train.build(args.model, False, device, torch.bfloat16)
    step_model = train.prepare(model, args.mode)
    optimizer = torch.optim.AdamW(model.parameters(), lr=train.LR, fused=True, capturable=True)
    batch_size, seq = train.SHAPES[args.model]
    generator = torch.Generator().manual_seed(train.SEED)
    vocab = model.config.vocab_size
    inputs = train.model_inputs(args.model, torch.randint(vocab, (batch_size, seq), generator=generator),
                                vocab, generator, device)

    def train_step(**batch):
        loss = step_model(**batch).loss
        loss.backward()
        optimizer.step()
        return loss

    step = coda.capture_step(train_step, optimizer, warmup=3, context=unpadded_batches, **inputs)
    for _ in range(20):
        step(**inputs)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(20):
        step(**inputs)
    end.record()
    torch.cuda.synchronize()
    step_ms = start.elapsed_time(end) / 20

    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile
    # three steps back to back: the first absorbs the profiler's start-up on the host (call 1:
    # 2.5 ms between the step's two input copies); the others show what a replay costs
    # between steps and whether each step's kernels fill its time
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            step(**inputs)
        torch.cuda.synchronize()
    every = sorted(((e.time_range.start, e.time_range.end, e.name) for e in prof.events()
                    if e.device_type == DeviceType.CUDA and not e.is_user_annotation), key=lambda k: k[0])
    per_step = len(every) // 3
    steps = [every[i * per_step:(i + 1) * per_step] for i in range(3)]
    for i, ks in enumerate(steps):
        print(f"step {i}: {len(ks)} kernels, span {ks[-1][1] - ks[0][0]:.1f} us, "
              f"busy {sum(e - s for s, e, _ in ks):.1f} us, first {ks[0][2][:30]}, last {ks[-1][2][:30]}"
              + (f", idle before it {ks[0][0] - steps[i - 1][-1][1]:.1f} us" if i else ""))
    kernels = steps[2]
    gaps = [(kernels[i + 1][0] - kernels[i][1], kernels[i][2][:60], kernels[i + 1][2][:60])
            for i in range(len(kernels) - 1)]
    busy = sum(e - s for s, e, _ in kernels)
    span = kernels[-1][1] - kernels[0][0]
    after = defaultdict(list)   # the gap after each kernel name
    for gap, name, _ in gaps:
        after[name].append(gap)
    summary = dict(step_ms_timed=step_ms, kernels=len(kernels), span_us=span, busy_us=busy,
                   idle_us=sum(max(g, 0) for g, _, _ in gaps),
                   gap_median_us=sorted(g for g, _, _ in gaps)[len(gaps) // 2],
                   longest=sorted(gaps, reverse=True)[:25],
                   idle_after=sorted(((round(sum(v), 1), len(v), k) for k, v in after.items()),
                                     reverse=True)[:30])
    print(json.dumps({k: v for k, v in summary.items() if k not in ("longest", "idle_after")}))
    for row in summary["longest"]:
        print("gap", round(row[0], 2), row[1], "->", row[2])
    for row in summary["idle_after"]:
        print("idle after", row)
    rows = [(round(s, 2), round(e - s, 2), n[:80]) for s, e, n in kernels]
    Path(args.json).write_text(json.dumps(dict(summary=summary, kernels=rows), indent=0))


if __name__ == "__main__":
    main()
