"""Where the host time of a CODA-patched training step goes: cProfile over 3 steps after 6.

    python benchmarks/profile_step.py [--model gpt2] [--out benchmarks/results/host_profile_gpt2.txt]

The model and batch are benchmarks/train.py's (a tiny model in float32 on a machine without a
GPU, whose profile goes to a temporary file unless --out names one: the committed profile is a
GPU's). Writes the step time without the profiler, then pstats sorted by own time and by
cumulative time. cProfile slows Python down: read shares and call counts, not absolute times.
"""

import argparse
import cProfile
import io
import pstats
import tempfile
import time
from pathlib import Path

import torch
import train


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gpt2", choices=train.MODELS)
    parser.add_argument("--out", default=None, help="default benchmarks/results/host_profile_MODEL.txt "
                                                    "(on a CPU, in the temporary directory)")
    args = parser.parse_args()
    tiny = not torch.cuda.is_available()
    device = torch.device("cpu" if tiny else "cuda")
    model = train.build(args.model, tiny, device, torch.float32 if tiny else torch.bfloat16)
    step_model = train.prepare(model, "coda")
    optimizer = torch.optim.AdamW(model.parameters(), lr=train.LR, fused=not tiny)
    batch_size, seq = train.SMOKE_SHAPE if tiny else train.SHAPES[args.model]
    generator = torch.Generator().manual_seed(train.SEED)
    vocab = model.config.vocab_size
    inputs = train.model_inputs(args.model, torch.randint(vocab, (batch_size, seq), generator=generator),
                                vocab, generator, device)

    def steps(count: int) -> float:
        start = time.perf_counter()
        for _ in range(count):
            step_model(**inputs).loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        train.synchronize(device)
        return (time.perf_counter() - start) / count

    steps(3)                     # compile and tune
    step_s = steps(3)
    profiler = cProfile.Profile()
    profiler.enable()
    steps(3)
    profiler.disable()
    text = io.StringIO()
    text.write(f"coda: step {step_s * 1e3:.1f} ms without the profiler\n")
    stats = pstats.Stats(profiler, stream=text)
    stats.sort_stats("tottime").print_stats(70)
    stats.sort_stats("cumulative").print_stats(120)
    folder = Path(tempfile.gettempdir()) if tiny else Path("benchmarks/results")   # a GPU's is committed
    out = Path(args.out) if args.out else folder / f"host_profile_{args.model}.txt"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text.getvalue())
    print(f"{args.model} coda: {step_s * 1e3:.1f} ms a step; profile in {out}")


if __name__ == "__main__":
    main()
