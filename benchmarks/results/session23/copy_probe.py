"""Twenty-third session: which op launches the kernels outside CODA, cuBLAS, attention and the
optimizer in a CODA-patched GPT-2 and BERT training step (H200, bf16)? One step under the profiler
with input shapes and Python stacks; for each CPU op whose kernels are PyTorch's element-wise,
copy, cat or reduction kernels: the op, its input shapes, its kernels' time, and the innermost
frames of the stack in coda / transformers. Writes $OUT/copy_probe.txt (stdout)."""

import sys
from collections import defaultdict
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import train  # benchmarks/train.py

import coda
from coda.integrations.hf import unpadded_batches

WATCH = ("elementwise", "CatArray", "reduce_kernel", "copy", "Fill")


def main() -> None:
    device = torch.device("cuda")
    for name in ("gpt2", "bert"):
        model = train.build(name, False, device, torch.bfloat16)
        coda.patch(model)
        batch, seq = train.SHAPES[name]
        gen = torch.Generator().manual_seed(0)
        vocab = model.config.vocab_size
        ids = torch.randint(vocab, (batch, seq), generator=gen)
        inputs = train.model_inputs(name, ids, vocab, gen, device)
        with unpadded_batches():   # as the graph modes run (no explicit mask: SDPA's fused kernels)
            for _ in range(2):
                model(**inputs).loss.backward()
        torch.cuda.synchronize()
        activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
        with unpadded_batches(), profile(activities=activities, record_shapes=True, with_stack=True) as prof:
            model(**inputs).loss.backward()
            torch.cuda.synchronize()
        found: dict[tuple, list] = defaultdict(lambda: [0.0, 0, ""])
        for event in prof.events():
            kernels = [k for k in event.kernels if any(w in k.name for w in WATCH)]
            if not kernels or any(child.kernels for child in event.cpu_children):
                continue
            stack = [f for f in event.stack if "coda" in f or "transformers" in f][:4]
            key = (event.name, str(event.input_shapes)[:150], kernels[0].name[:90])
            found[key][0] += sum(k.duration for k in kernels)
            found[key][1] += 1
            found[key][2] = " | ".join(stack)
        print(f"== {name}")
        for (op, shapes, kernel), (us, count, stack) in sorted(found.items(), key=lambda kv: -kv[1][0])[:25]:
            print(f"{us:8.1f} us {count:3d}x {op} {shapes}\n      {kernel}\n      {stack}")
        del model
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
