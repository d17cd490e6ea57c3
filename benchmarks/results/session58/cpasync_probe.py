"""Tile operands fetched with cp.async instead of TMA, in the ping-pong kernel (a probe).

    CODA_AUTOTUNE=0 python benchmarks/results/session58/cpasync_probe.py [--json out.json]

The fifty-eighth session's first call (H100) found a tile operand's fetch free when its bytes
come from L2 (ablation_probe.py's `l2` edit: every tile fetches the first tile's operand, 136.8
against 157.1 µs for (c) at 16384x3072x768, the same as not fetching at all) and twice as dear
when each operand is fetched twice (177.2). The bytes through the SM are the same in `l2`; what
differs is how long each request waits on DRAM. Our reading: the operand's TMA requests, held
for DRAM's latency, hold up the A and B loads queued behind them in the SM's TMA unit. This edit
(`cpasync`) fetches the operands with cp.async from the MMA warpgroup's 128 threads (16 bytes
a thread a copy) into the same buffers, where no TMA request waits; the epilogue waits for the
copies (`wait_group` and a barrier) instead of the TMA barrier. Unlike the cut variants of
ablation_probe.py it computes the right result: each variant's outputs are compared with the
unedited kernel's (bitwise).

Own-buffer configurations in 2 slices only (the copy layout covers a 64-column slice).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve()
sys.path[:0] = [str(HERE.parents[1] / "session57")]
import ablation_probe as ap  # noqa: E402

from coda.codegen.tuning import Config  # noqa: E402
from coda.ops.common import PLAIN  # noqa: E402

COPY = r"tma\.async_copy_global_to_shared\(op_(\w+)_desc, "


def _cp_async(line: str) -> str:
    """The TMA fetch of operand slice j as cp.async copies of a [BLOCK_M, BLOCK_N // 2] slice."""
    name = re.match(COPY, line).group(1)
    return "\n".join([
        "cp_rows = pid_m * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, CP_LAYOUT))",
        "cp_cols = (pid_n * EPILOGUE_SPLIT + j) * (BLOCK_N // EPILOGUE_SPLIT) + "
        "gl.arange(0, BLOCK_N // EPILOGUE_SPLIT, layout=gl.SliceLayout(0, CP_LAYOUT))",
        f"async_copy.async_copy_global_to_shared(op_{name}_bufs.index(WG * EPILOGUE_SPLIT + j), "
        f"op_{name}_ptr + cp_rows[:, None] * op_{name}_s0 + cp_cols[None, :], "
        "mask=(cp_rows < M)[:, None] & (cp_cols < N)[None, :])",
        "async_copy.commit_group()"])


def _cp_async_evict_first(line: str) -> str:
    """_cp_async with the operand's lines marked first to leave L2 (`cpasync_ef`: does the streamed
    operand push A's and B's lines out?)."""
    return _cp_async(line).replace(")\nasync_copy.commit_group()",
                                   ", eviction_policy=\"evict_first\")\nasync_copy.commit_group()")


ap.EDITS["cpasync"] = [
    (r"^from triton\.experimental\.gluon\.language\.nvidia\.hopper import \(",
     lambda line: "from triton.experimental.gluon.language.nvidia.ampere import async_copy\n" + line),
    # the operand's pointer and row stride go to the MMA partitions beside its descriptor
    (r"op_(\w+)_desc, op_\1_bufs", lambda line: re.sub(r"op_(\w+)_desc, op_\1_bufs",
                                                       r"op_\1_desc, op_\1_ptr, op_\1_s0, op_\1_bufs", line)),
    # (the copies' layout: 16 bytes a thread, a warp 4 rows of 64 columns)
    (ap.EXPECT, "CP_LAYOUT: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])"),
    (COPY, _cp_async),
    # every thread's copies may start only once the tile's TMA stores have read the buffers
    (r"^\s*tma\.store_wait\(0\)$", "tma.store_wait(0)\ngl.thread_barrier()"),
    (r"mbarrier\.wait\(tiles_ready", "async_copy.wait_group(0)\ngl.thread_barrier()"),
]

ap.EDITS["cpasync_ef"] = [(COPY, _cp_async_evict_first) if edit[0] == COPY else edit
                          for edit in ap.EDITS["cpasync"]]

#: The operands' copies spread over the K loop (`spread`): each of the first BLOCK_M / CHUNK K
#: steps of a warpgroup's own K loop copies CHUNK rows of every slice of every operand (2 KB a
#: slice: one 16-byte cp.async a thread), so that a tile's operand misses go to DRAM a few at a
#: time instead of all at its start. (K >= 8 blocks: the probe's shapes.)
CHUNK = 16


def spread_edits(operands: list[str]) -> list:
    """`cpasync`'s edits with the copies moved into the K loop, CHUNK rows a step (a shared-memory
    slice's start must be a constant: one branch a chunk)."""
    copies = [f"            async_copy.async_copy_global_to_shared("
              f"op_{name}_bufs.index(WG * EPILOGUE_SPLIT + j).slice(c * {CHUNK}, {CHUNK}), "
              f"op_{name}_ptr + cp_rows[:, None] * op_{name}_s0 + "
              "cp_cols[None, :], mask=(cp_rows < M)[:, None] & (cp_cols < N)[None, :])" for name in operands]
    chunk_copies = "\n".join([
        "step += 1",
        f"for c in gl.static_range(BLOCK_M // {CHUNK}):",
        "    if kb == c:",
        "        for j in gl.static_range(EPILOGUE_SPLIT):",
        f"            cp_rows = pid_m * BLOCK_M + c * {CHUNK} + gl.arange(0, {CHUNK}, "
        "layout=gl.SliceLayout(1, CP_LAYOUT))",
        "            cp_cols = (pid_n * EPILOGUE_SPLIT + j) * (BLOCK_N // EPILOGUE_SPLIT) + "
        "gl.arange(0, BLOCK_N // EPILOGUE_SPLIT, layout=gl.SliceLayout(0, CP_LAYOUT))",
        *copies,
        "        async_copy.commit_group()"])
    edits = [edit for edit in ap.EDITS["cpasync"] if edit[0] != COPY]
    return [*edits, (COPY, "pass"), (r"^ {12}step \+= 1$", chunk_copies)]


#: (m, n, k, programs, ring depths): each program in its own-buffer, 2-slice configuration at each
#: depth, unedited, with cp.async, and with no fetch at all (the bound)
OPERANDS = {"residual_rowsumsq": ["residual"], "dgelu_bias_grad": ["pre"]}
SETS = {
    "k768": (16384, 3072, 768, ["residual_rowsumsq", "dgelu_bias_grad"], (4, 5)),
    "k2048": (16384, 8192, 2048, ["residual_rowsumsq", "dgelu_bias_grad"], (4,)),
}


def case(m: int, n: int, k: int, names: list[str], depths: tuple[int, ...], rounds: int) -> dict:
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16) / k**0.5
    plain = PLAIN.bind(a, b)
    run, agree = {}, {}
    for s in (4, 5):
        plan = PLAIN.triton.plan(plain, Config(128, 128, 64, 4, s, split_epilogue=2, pingpong=True))
        run[f"plain_s{s}e2"] = lambda p=plan: p.run(a, b, {}, None, 0)
    run["cublas"] = lambda: torch.matmul(a, b)
    progs = ap.programs(m, n)
    for name, depth in ((name, depth) for name in names for depth in depths):
        prog, ops = progs[name]
        config = Config(128, 128, 64, 4, depth, split_epilogue=2, pingpong=True)
        launch = prog.bind(a, b, seed=1, **ops)
        base = prog.triton.plan(launch, config)
        expected = base.run(a, b, launch.values, None, 1)
        label = f"{name}/s{depth}e2"
        run[label] = lambda p=base, v=launch.values: p.run(a, b, v, None, 1)
        for edit in ("cpasync", "cpasync_ef", "spread", "nofetch"):
            edits = spread_edits(OPERANDS[name]) if edit == "spread" else ap.EDITS[edit]
            plan = ap.edited_plan(prog, launch, config, edits)
            print(f"{m}x{n}x{k} {label}_{edit}: first run", flush=True)
            got = plan.run(a, b, launch.values, None, 1)
            torch.cuda.synchronize()
            if edit != "nofetch":
                agree[f"{label}_{edit}"] = {out: bool(torch.equal(got[out], expected[out]))
                                            for out in expected}
                print(f"{m}x{n}x{k} {label}_{edit} outputs equal the unedited kernel's: "
                      f"{agree[f'{label}_{edit}']}", flush=True)
            run[f"{label}_{edit}"] = lambda p=plan, v=launch.values: p.run(a, b, v, None, 1)
    us, times = ap.timed_rounds(run, rounds, ap.event_us)
    print(json.dumps(dict(m=m, n=n, k=k, us=us)), flush=True)
    return dict(m=m, n=n, k=k, us=us, us_rounds=times, outputs_equal=agree)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sets", default=",".join(SETS))
    args = parser.parse_args()
    torch.manual_seed(0)
    rows = [case(*SETS[name], args.rounds) for name in args.sets.split(",")]
    if args.json:
        meta = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, command=" ".join(sys.argv))
        Path(args.json).write_text(json.dumps(dict(meta, rows=rows), indent=1))


if __name__ == "__main__":
    main()
