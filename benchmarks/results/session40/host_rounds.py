"""Why CODA's modes without a CUDA graph read 25-40% slower in run_all.sh's rounds (fortieth
session, call 2: GPT-2 `coda` 262-359k tokens/s a round against 440k in one stretch the session
before; BERT `coda` 335k falling to 243k), when the graphed and torch.compile modes did not move.

A round of train.py --rounds in a child: it gives its cached GPU memory back
(`torch.cuda.empty_cache`), sleeps until its turn, runs one untimed step and times the next. Here,
in one process per model, the same step (`coda` mode, no graph) in rounds of 6 timed steps after
one untimed one, three ways: back to back; after a 2 s pause; after a pause and an empty_cache.
Per round: tokens/s, the host's time to issue the steps, and the allocator's counters.
Run: python benchmarks/results/session40/host_rounds.py"""

import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import train  # benchmarks/train.py


def coda_step(name: str):
    """(step, tokens a step): one training step of `name` patched by CODA, no CUDA graph, as
    train.py's `coda` mode runs it."""
    device, dtype = torch.device("cuda"), torch.bfloat16
    model = train.build(name, False, device, dtype)
    step_model = train.prepare(model, "coda")
    optimizer = torch.optim.AdamW(model.parameters(), lr=train.LR, fused=True)
    batch, seq = train.SHAPES[name]
    generator = torch.Generator().manual_seed(train.SEED)
    vocab = model.config.vocab_size
    inputs = train.model_inputs(name, torch.randint(vocab, (batch, seq), generator=generator), vocab,
                                generator, device)

    def step():
        loss = step_model(**inputs).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return step, batch * seq


def rounds(name: str, pause: float, empty: bool, count: int = 4, steps: int = 6) -> None:
    step, tokens = coda_step(name)
    for _ in range(5):
        step()
    torch.cuda.synchronize()
    for r in range(count):
        if pause:
            if empty:
                torch.cuda.empty_cache()
            time.sleep(pause)
        step()
        torch.cuda.synchronize()
        before = torch.cuda.memory_stats()
        start = time.perf_counter()
        issue = 0.0
        for _ in range(steps):
            t0 = time.perf_counter()
            step()
            issue += time.perf_counter() - t0
        torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        after = torch.cuda.memory_stats()
        counters = {k: after.get(k, 0) - before.get(k, 0)
                    for k in ("num_alloc_retries", "num_device_alloc", "num_device_free")}
        rate = steps * tokens / seconds / 1e3
        print(f"{name} pause={pause} empty_cache={empty} round {r}: {rate:.1f}k tokens/s, "
              f"step {1e3 * seconds / steps:.1f} ms, host issue {1e3 * issue / steps:.1f} ms, "
              f"{counters}", flush=True)


def main() -> None:
    for name in ("gpt2", "bert"):
        for pause, empty in ((0.0, False), (2.0, False), (2.0, True)):
            rounds(name, pause, empty)
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
