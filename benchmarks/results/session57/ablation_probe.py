"""Where the ping-pong kernel's time goes for epilogues with tile operands: each program in its
configuration, and the same kernel with one part taken out by an edit of its generated source
(a probe: the edited kernels compute wrong results and are only timed).

    CODA_AUTOTUNE=0 python benchmarks/results/session57/ablation_probe.py [--json out.json]

Edits: `nowait` (the MMA warpgroups do not wait for their tile operands to arrive), `nofetch`
(nothing fetches them: the epilogue reads whatever the buffers hold), `nostore` (the epilogue's
TMA stores are not issued). Each launch ten times in a CUDA graph (kernel_configs.graph_us;
`--events`: twenty launches between CUDA events, event_us), five rounds in turn, alternating
order, medians.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "benchmarks")]
import kernel_configs as kc  # noqa: E402

import coda  # noqa: E402
from coda.codegen import kernel as km  # noqa: E402
from coda.codegen.tuning import Config  # noqa: E402
from coda.ops import gated_mlp  # noqa: E402
from coda.ops.common import PLAIN  # noqa: E402

FETCH, EXPECT = r"tma\.async_copy_global_to_shared\(op_", r"mbarrier\.expect\(tiles_ready"
EDITS = {  # line pattern -> what the line becomes (a line, or a function of the line)
    "nowait": [(r"mbarrier\.wait\(tiles_ready", "pass")],
    "nofetch": [(r"mbarrier\.wait\(tiles_ready", "pass"),
                (EXPECT, "mbarrier.arrive(tiles_ready.index(WG), count=1)"), (FETCH, "pass")],
    "nostore": [(r"tma\.async_copy_shared_to_global\(out_", "pass")],
    # the open questions (docs/performance.md, "Where a tile operand's time goes"): each operand
    # fetched twice (twice the bytes), and every tile fetching the first tile's operands (bytes
    # that L2 holds: the SM's port without the HBM)
    "twice": [(EXPECT, lambda line: line.replace("index(WG), ", "index(WG), 2 * ", 1)),
              (FETCH, lambda line: f"{line}\n{line}")],
    "l2": [(FETCH, lambda line: line.replace("[pid_m * BLOCK_M, (pid_n * EPILOGUE_SPLIT + j) *", "[0, j *"))],
}
EDITS["nofetch_nostore"] = EDITS["nofetch"] + EDITS["nostore"]


def edited_plan(prog, launch, config: Config, edits: list) -> km.Plan:
    """A Plan of `prog`'s ping-pong kernel with each line matching an edit's pattern replaced."""
    write = km._source_file

    def edited(filename: str, source: str):
        lines = source.split("\n")
        for pattern, new in edits:
            hits = [i for i, line in enumerate(lines) if re.search(pattern, line)]
            assert hits, pattern
            for i in hits:
                indent = lines[i][:len(lines[i]) - len(lines[i].lstrip())]
                text = new(lines[i].strip()) if callable(new) else new
                assert text != lines[i].strip(), (pattern, text)
                lines[i] = "\n".join(indent + part for part in text.split("\n"))
        text = "\n".join(lines)
        return write(filename.replace(".py", f"_{abs(hash(text)) % 10**8}.py"), text)

    km._source_file = edited
    try:
        sig = km._signature(launch, "pingpong", share_tiles=config.share_tiles)
        kernel = prog.triton._build(sig, "pingpong")
    finally:
        km._source_file = write
    return km.Plan(kernel, config, launch)


def programs(m: int, n: int) -> dict:
    bf16 = dict(device="cuda", dtype=torch.bfloat16)
    return {
        "swiglu_grad": (gated_mlp.grad_program("silu", "sumsq", True),
                        dict(g=torch.randn(m, n, **bf16), u=torch.randn(m, n, **bf16),
                             ss=torch.rand(m, device="cuda") * 2048 + 1, inv_n=1 / 2048, eps=1e-5)),
        "residual_rowsumsq": (coda.compile("EPILOGUE(residual: tile) { output = input + residual; "
                                           "ss = row_sum(output * output); }"),
                              dict(residual=torch.randn(m, n, **bf16))),
        "dgelu_bias_grad": (coda.compile("EPILOGUE(pre: tile) { output = input * gelu_grad(pre); "
                                         "db = col_sum(output); }"), dict(pre=torch.randn(m, n, **bf16))),
    }


CONFIGS = {"s4e2": (4, 2, False), "s4e2x": (4, 2, True), "s4e4x": (4, 4, True), "s5e2x": (5, 2, True)}


def event_us(fn, reps: int = 20) -> float:
    """µs per call: the median of 5 stretches of `reps` launches timed with CUDA events (call 3
    timed from CUDA graphs, as calls 1 and 2 did, and its timings at K = 768 never finished,
    though every variant runs 400 launches in seconds: hang_probe.py, call 4)."""
    for _ in range(3):
        fn()
    times = []
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / reps)
    return sorted(times)[2]


def case(m: int, n: int, k: int, variants: list[str], rounds: int, timer) -> dict:
    """`variants`: "program/config" or "program/config_edit" (CONFIGS, EDITS)."""
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16) / k**0.5
    plain = PLAIN.bind(a, b)
    run = {}
    for s in (4, 5):
        plan = PLAIN.triton.plan(plain, Config(128, 128, 64, 4, s, split_epilogue=2, pingpong=True))
        run[f"plain_s{s}e2"] = lambda p=plan: p.run(a, b, {}, None, 0)
    run["cublas"] = lambda: torch.matmul(a, b)
    progs = programs(m, n)
    for variant in variants:
        name, _, label = variant.partition("/")
        config_label, _, edit = label.partition("_")
        s, e, shared = CONFIGS[config_label]
        config = Config(128, 128, 64, 4, s, split_epilogue=e, pingpong=True, share_tiles=shared)
        prog, ops = progs[name]
        launch = prog.bind(a, b, seed=1, **ops)
        plan = edited_plan(prog, launch, config, EDITS[edit]) if edit else prog.triton.plan(launch, config)
        print(f"{m}x{n}x{k} {variant}: first run", flush=True)
        plan.run(a, b, launch.values, None, 1)
        torch.cuda.synchronize()
        run[variant] = lambda p=plan, v=launch.values: p.run(a, b, v, None, 1)
    us, times = timed_rounds(run, rounds, timer)
    print(json.dumps(dict(m=m, n=n, k=k, us=us)), flush=True)
    return dict(m=m, n=n, k=k, us=us, us_rounds=times)


def timed_rounds(run: dict, rounds: int, timer) -> tuple[dict, dict]:
    """(median µs, every round's µs) of each launch in `run`, timed in turn `rounds` times, the
    order reversed in odd rounds."""
    times = {label: [] for label in run}
    for r in range(rounds):
        for label in (run if r % 2 == 0 else reversed(list(run))):
            times[label].append(timer(run[label]))
        print(f"round {r}: " + json.dumps({label: round(t[-1], 1) for label, t in times.items()}), flush=True)
    return {label: round(statistics.median(t), 1) for label, t in times.items()}, times


#: call 1 (LLaMA-492M's SwiGLU gradient) and call 3 (GPT-2's fc1 shape; a shared configuration
#: of a program without a packed output last)
SETS = {
    "llama": (16384, 5632, 2048, ["swiglu_grad/s4e2x", *(f"swiglu_grad/s4e2x_{e}" for e in EDITS),
                                  "swiglu_grad/s4e4x"]),
    "contention": (16384, 3072, 768, ["residual_rowsumsq/s4e2", "residual_rowsumsq/s4e2_nofetch",
                                      "residual_rowsumsq/s4e2_twice", "residual_rowsumsq/s4e2_l2"]),
    "k768": (16384, 3072, 768, [
        "swiglu_grad/s4e2x", "swiglu_grad/s4e2x_nowait", "swiglu_grad/s4e2x_nofetch",
        "residual_rowsumsq/s4e2", "residual_rowsumsq/s4e2_nowait", "residual_rowsumsq/s4e2_nofetch",
        "residual_rowsumsq/s4e2_nostore", "dgelu_bias_grad/s4e2", "dgelu_bias_grad/s4e2_nofetch",
        "residual_rowsumsq/s4e2x", "residual_rowsumsq/s5e2x", "dgelu_bias_grad/s4e2x"]),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sets", default=",".join(SETS))
    parser.add_argument("--events", action="store_true", help="time launches with CUDA events, not graphs")
    args = parser.parse_args()
    torch.manual_seed(0)
    timer = event_us if args.events else (lambda fn: kc.graph_us(fn, 10))
    rows = [case(*SETS[name], args.rounds, timer) for name in args.sets.split(",")]
    if args.json:
        meta = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, command=" ".join(sys.argv))
        Path(args.json).write_text(json.dumps(dict(meta, rows=rows), indent=1))


if __name__ == "__main__":
    main()
