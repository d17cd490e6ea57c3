"""Which operator launches each GPU kernel of a CODA-patched GPT-2 training step that is not a
GEMM, an attention or a CODA kernel: one eager step (16×1024, bf16) under torch.profiler with
shapes, each such kernel listed with its µs and the chain of CPU operators above it (autograd's
backward node included), so that the "other" time of train.py's breakdown has a name.

    PYTHONPATH=src python benchmarks/results/session31/step_kernels.py [--model gpt2]
"""

import argparse
import sys
from collections import defaultdict
from pathlib import Path

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import train


def chain(event) -> str:
    names = []
    while event is not None and len(names) < 5:
        shapes = [s for s in (event.input_shapes or []) if s][:3]
        names.append(f"{event.name}{shapes if shapes else ''}")
        event = event.cpu_parent
    return " < ".join(names)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="gpt2")
    args = parser.parse_args()
    device = torch.device("cuda")
    model = train.prepare(train.build(args.model, False, device, torch.bfloat16), "coda")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    batch, seq = train.SHAPES[args.model]
    gen = torch.Generator().manual_seed(0)
    vocab = model.config.vocab_size
    inputs = train.model_inputs(args.model, torch.randint(vocab, (batch, seq), generator=gen), vocab,
                                gen, device)

    def step():
        model(**inputs).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(2):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
        step()
        torch.cuda.synchronize()
    rows = defaultdict(lambda: [0.0, 0])
    for event in prof.events():
        if event.device_type == DeviceType.CUDA:
            continue
        for kernel in event.kernels:
            if train.classify(kernel.name) != "other":
                continue
            row = rows[(kernel.name[:90], chain(event))]
            row[0] += kernel.duration
            row[1] += 1
    for (kernel, ops), (us, n) in sorted(rows.items(), key=lambda item: -item[1][0])[:40]:
        print(f"{us:8.1f} us {n:3d}x {kernel}\n            {ops[:400]}")


if __name__ == "__main__":
    main()
