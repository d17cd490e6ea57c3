"""LLaMA-492M's CODA launches at 1024 < K <= 2048 (hidden 2048: the forward's q/k/v, gate/up,
out-projection and LM head GEMMs) in the heuristic's configuration (the
Triton kernel) against the ping-pong kernel's, which the heuristic gives at K <= 1024 only. The
fast-path tables read the ping-pong kernel 2-11% faster for every epilogue at 16384x8192x2048
(sessions 39 and 42 on the H200, 57 on an H100).

    CODA_AUTOTUNE=0 python benchmarks/results/session57/k2048_probe.py [--json out.json]

The launches are recorded from one training forward of a one-layer LLaMA-492M (8 x 2048 tokens,
coda.patch; its backward's only such launch is the SwiGLU gradient's, already ping-pong); each
configuration's outputs are compared with the heuristic's (kernel_configs.agrees), then each
launch is timed, twenty launches between CUDA events, five rounds in alternating order, medians.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "benchmarks"), str(Path(__file__).resolve().parent)]
import kernel_configs as kc  # noqa: E402
from ablation_probe import event_us  # noqa: E402

import coda  # noqa: E402
from coda.codegen import kernel as km  # noqa: E402
from coda.codegen.tuning import Config  # noqa: E402

PINGPONG = {f"pingpong_s{s}e{e}": Config(128, 128, 64, 4, s, split_epilogue=e, pingpong=True)
            for s, e in ((4, 2), (5, 4))}


def recorded_launches() -> list:
    """(TritonProgram, Launch) of every CODA GEMM launch at 1024 < K <= 2048 in a forward."""
    import transformers as tf

    config = tf.LlamaConfig(hidden_size=2048, num_hidden_layers=1, num_attention_heads=16,
                            num_key_value_heads=4, intermediate_size=5632, vocab_size=32000,
                            max_position_embeddings=2048, attention_dropout=0.0, use_cache=False,
                            attn_implementation="sdpa")
    model = tf.LlamaForCausalLM(config).to("cuda", torch.bfloat16).train()
    coda.patch(model)
    ids = torch.randint(0, 32000, (8, 2048), device="cuda")
    seen, start = {}, km.TritonProgram.start

    def recording(self, launch, config=None):
        if config is None and launch.a.is_cuda and 1024 < launch.k <= 2048 and self.pingpong:
            seen.setdefault((self.program.name, launch.m, launch.n, launch.k), (self, launch))
        return start(self, launch, config)

    km.TritonProgram.start = recording
    try:
        model(input_ids=ids, labels=ids)   # the backward has no such launch but the packed one
        torch.cuda.synchronize()
    finally:
        km.TritonProgram.start = start
    # (the heuristic already gives a packed output the ping-pong kernel at any K)
    return [v for v in seen.values() if not v[0].packs]


def case(triton, launch, rounds: int) -> dict:
    def runner(plan):
        return lambda: plan.run(launch.concat or launch.a, launch.b, launch.values, None, launch.seed,
                                (launch.m_limit, launch.k_limit))

    heuristic = triton.start(launch)[0]
    run = {"heuristic": runner(heuristic)}
    first = {k: v.clone() for k, v in run["heuristic"]().items()}
    agree = {"heuristic": True}
    for label, config in PINGPONG.items():
        plan = triton.plan(launch, config)
        try:
            got = {k: v.clone() for k, v in runner(plan)().items()}
        except Exception as error:  # a probe: say what did not run (shared memory, ...)
            print(f"{triton.program.name} {label}: {type(error).__name__}: {str(error)[:160]}", flush=True)
            continue
        run[label], agree[label] = runner(plan), kc.agrees(got, first)
    times = {label: [] for label in run}
    for r in range(rounds):
        for label in (run if r % 2 == 0 else reversed(list(run))):
            times[label].append(event_us(run[label]))
    us = {label: round(statistics.median(t), 1) for label, t in times.items()}
    row = dict(program=triton.program.name, m=launch.m, n=launch.n, k=launch.k,
               heuristic=str(heuristic.config), agrees=agree, us=us)
    print(json.dumps(row), flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    torch.manual_seed(0)
    rows = [case(triton, launch, args.rounds) for triton, launch in recorded_launches()]
    if args.json:
        meta = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, command=" ".join(sys.argv))
        Path(args.json).write_text(json.dumps(dict(meta, rows=rows), indent=1))


if __name__ == "__main__":
    main()
