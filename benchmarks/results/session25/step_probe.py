"""Twenty-fifth session: every kernel of one CODA-patched training step and what launched it.

    python benchmarks/results/session25/step_probe.py gpt2 [bert ...]

The model of benchmarks/train.py (bf16, its batch), patched by `coda.patch`, three steps of
warm-up, then one step run eagerly (no CUDA graph: the profiler then ties each kernel to the
operator and Python line that launched it) under torch.profiler. Writes, per model,
$OUT/step_<model>.txt: every kernel (launches, µs), and the operators by their Python stack
(5 frames) that launched the small kernels (fills, memsets, copies, concatenations, element-wise
ops, CODA's finishing kernels).
"""

import os
import sys
from collections import defaultdict
from pathlib import Path

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import train as bench  # benchmarks/train.py

import coda


def probe(name: str) -> str:
    device = torch.device("cuda")
    model = bench.build(name, False, device, torch.bfloat16)
    coda.patch(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=bench.LR, fused=True)
    batch, seq = bench.SHAPES[name]
    generator = torch.Generator().manual_seed(bench.SEED)
    vocab = model.config.vocab_size
    inputs = bench.model_inputs(name, torch.randint(vocab, (batch, seq), generator=generator), vocab,
                                generator, device)

    def step() -> None:
        with bench.unpadded_batches():
            model(**inputs).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], with_stack=True) as prof:
        step()
        torch.cuda.synchronize()
    per_kernel: dict[str, list] = defaultdict(lambda: [0, 0.0])
    for event in prof.events():
        if event.device_type == DeviceType.CUDA and not event.is_user_annotation:
            per_kernel[event.name][0] += 1
            per_kernel[event.name][1] += event.device_time_total
    lines = [f"# {name}: every kernel of one eager CODA step (launches, µs)"]
    total = sum(us for _, us in per_kernel.values())
    lines.append(f"total {total:.0f} us, {sum(n for n, _ in per_kernel.values())} launches")
    for kernel, (n, us) in sorted(per_kernel.items(), key=lambda kv: -kv[1][1]):
        lines.append(f"{us:9.1f} {n:5d}  {kernel[:150]}")
    lines += ["", "# operators by stack (self CUDA time)"]
    lines.append(prof.key_averages(group_by_stack_n=5).table(sort_by="self_cuda_time_total",
                                                             row_limit=80, max_name_column_width=60))
    return "\n".join(lines)


def main() -> None:
    out = Path(os.environ.get("OUT", "."))
    for name in sys.argv[1:] or ["gpt2"]:
        text = probe(name)
        (out / f"step_{name}.txt").write_text(text)
        print("\n".join(text.splitlines()[:60]), flush=True)


if __name__ == "__main__":
    main()
