"""CODA's host time a training step, measured on a CPU: the real launch path (binding, plan
cache, argument lists, output allocation, autograd Functions, HF's modules) with every Triton
kernel replaced by a no-op, on a model of GPT-2's (or BERT's) layer count and tiny widths, so
that torch's own CPU kernels cost little. Not the GPU machine's host time (its CPU and CUDA's
launch costs differ), but the same Python: a change that takes host time off here takes it off
there. Outputs are garbage (no kernel writes them); the loss is not looked at.
Run: python benchmarks/results/session45/host_cpu.py [gpt2|bert] [--profile]"""

import os
import sys
import time
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "1"   # CODA's Triton path for CPU tensors

import torch

import coda.codegen.kernel as kernel

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import train  # benchmarks/train.py


def noop(*args, **kwargs):
    return None


def first_launch(fn, grid, args, meta, device):
    return None, noop


kernel.first_launch = first_launch


from triton.runtime.interpreter import InterpretedFunction  # noqa: E402

InterpretedFunction.run = noop   # kernels launched through Triton's own dispatch


def build(name: str):
    import transformers as tf
    sdpa = dict(attn_implementation="sdpa")
    if name == "gpt2":
        config = tf.GPT2Config(n_embd=64, n_layer=12, n_head=4, vocab_size=512, n_positions=64,
                               resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False, **sdpa)
        model = tf.GPT2LMHeadModel(config)
    else:
        config = tf.BertConfig(hidden_size=64, num_hidden_layers=12, num_attention_heads=4,
                               intermediate_size=256, vocab_size=512, max_position_embeddings=64,
                               hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **sdpa)
        model = tf.BertForMaskedLM(config)
    return model.to(torch.bfloat16).train()


def step_fn(name: str):
    torch.manual_seed(0)
    model = build(name)
    if "--eager" not in sys.argv:
        coda.patch(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    if "--compile" in sys.argv:
        model = torch.compile(model)
    ids = torch.randint(500, (2, 32))
    inputs = train.model_inputs(name, ids, 512, torch.Generator().manual_seed(0), torch.device("cpu"))

    def step():
        loss = model(**inputs).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return step


import coda  # noqa: E402


def host_seconds(step, calls: int, rounds: int = 7) -> tuple[float, float]:
    """(median, min) seconds a call of `step` takes on the host: `rounds` runs of `calls` calls,
    after 3 warm-up calls."""
    for _ in range(3):
        step()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            step()
        times.append((time.perf_counter() - start) / calls)
    times.sort()
    return times[len(times) // 2], times[0]


def profile(step, calls: int, keys=("tottime", "cumulative")) -> None:
    """cProfile of `calls` calls of `step`: the 40 functions first by each of `keys`."""
    import cProfile
    import pstats
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        step()
    profiler.disable()
    for key in keys:
        pstats.Stats(profiler).sort_stats(key).print_stats(40)


def main() -> None:
    name = sys.argv[1] if len(sys.argv) > 1 else "gpt2"
    step = step_fn(name)
    median, least = host_seconds(step, 5)
    label = name + "".join(f" {flag[2:]}" for flag in ("--eager", "--compile") if flag in sys.argv)
    print(f"{label}: host {1e3 * median:.2f} ms a step (median of 7 x 5 steps, min {1e3 * least:.2f})")
    if "--profile" in sys.argv:
        profile(step, 5)


if __name__ == "__main__":
    main()
