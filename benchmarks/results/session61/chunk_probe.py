"""(c) residual + row sum of squares in the ping-pong kernel with its residual fetched by the
loader warp in row chunks, a few KB at a time between the A/B loads of the tile's own K loop,
instead of the whole 32 KB tile at once by the MMA warpgroup before its K loop. The question
(docs/performance.md, sixtieth session): does a DRAM-bound operand cost the K loop because its
requests, all outstanding at once, hold up A's and B's? (A probe: an edit of the generated source.)

    CODA_AUTOTUNE=0 python benchmarks/results/session61/chunk_probe.py            # GPU: check, time
    python benchmarks/results/session61/chunk_probe.py --offline                  # sm_90 compile only

Each chunk of CHUNK_ROWS rows (both column slices) is issued after the A/B loads of K block
STAGES + c (the MMA warpgroup is then inside this tile's K loop, so its buffers are free: it
says so on `tiles_free` before its K loop), or at the tile's last K block where K is short.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path[:0] = [str(ROOT / "src"), str(HERE.parent / "session57"), str(ROOT / "tests" / "codegen")]
import ablation_probe as ap  # noqa: E402

import coda  # noqa: E402
from coda.codegen import kernel as km  # noqa: E402
from coda.codegen.tuning import Config  # noqa: E402
from coda.ops.common import PLAIN  # noqa: E402

PROGRAM = "EPILOGUE(residual: tile) { output = input + residual; ss = row_sum(output * output); }"
CONFIG = Config(128, 128, 64, 4, 4, split_epilogue=2, pingpong=True)


def replace_once(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, (text.count(old), old)
    return text.replace(old, new)


def chunked_source(source: str, rows: int) -> str:
    """The (c) kernel's source with the residual fetched by the loader in chunks of `rows` rows."""
    fetch_start = source.index("        mbarrier.expect(tiles_ready.index(WG)")
    fetch_end = source.index("        mbarrier.wait(turn.index(WG)")
    free = "        mbarrier.arrive(tiles_free.index(WG), count=1)\n"
    source = source[:fetch_start] + free + source[fetch_end:]
    source = replace_once(source, "                   B_N_CONTIGUOUS: gl.constexpr):\n",
                          "                   B_N_CONTIGUOUS: gl.constexpr, op_residual_chunk_desc, "
                          "op_residual_bufs, tiles_ready, tiles_free, EPILOGUE_SPLIT: gl.constexpr, "
                          "CHUNK_ROWS: gl.constexpr):\n")
    source = replace_once(source, "    step = 0\n    for tile_id in range(gl.program_id(0), row_blocks",
                          "    step = 0\n    t = 0\n    for tile_id in range(gl.program_id(0), row_blocks")
    chunk = """
                first = min(STAGES, k_blocks - 1)
                if kb == first:
                    mbarrier.wait(tiles_free.index(t % 2), (t // 2) & 1)
                    mbarrier.expect(tiles_ready.index(t % 2), EPILOGUE_SPLIT * (BLOCK_M // CHUNK_ROWS)
                                    * op_residual_chunk_desc.block_type.nbytes)
                for c in gl.static_range(BLOCK_M // CHUNK_ROWS):
                    if kb == min(STAGES + c, k_blocks - 1):
                        for j in gl.static_range(EPILOGUE_SPLIT):
                            tma.async_copy_global_to_shared(
                                op_residual_chunk_desc, [pid_m * BLOCK_M + c * CHUNK_ROWS,
                                (pid_n * EPILOGUE_SPLIT + j) * op_residual_chunk_desc.block_type.shape[1]],
                                tiles_ready.index(t % 2),
                                op_residual_bufs.index((t % 2) * EPILOGUE_SPLIT + j).slice(
                                    c * CHUNK_ROWS, CHUNK_ROWS))
"""
    last_load = "                          not B_N_CONTIGUOUS)\n                step += 1"
    source = replace_once(source, last_load + "\n", last_load + chunk + "        t += 1\n")
    barriers = "    tiles_ready = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())\n"
    source = replace_once(source, barriers, barriers + barriers.replace("tiles_ready", "tiles_free") + f"""\
    mbarrier.init(tiles_free.index(0), count=1)
    mbarrier.init(tiles_free.index(1), count=1)
    op_residual_chunk_layout: gl.constexpr = smem_layout({rows}, BLOCK_N // EPILOGUE_SPLIT,
                                                         op_residual_ptr.dtype.element_ty)
    op_residual_chunk_desc = tma.make_tensor_descriptor(op_residual_ptr, [M, N], [op_residual_s0, 1],
                                                        [{rows}, BLOCK_N // EPILOGUE_SPLIT],
                                                        op_residual_chunk_layout)
""")
    source = source.replace("red_ss_ptr, tiles_ready,\n", "red_ss_ptr, tiles_ready, tiles_free,\n")
    source = replace_once(source, "red_ss_ptr, tiles_ready,\n                  WG: gl.constexpr",
                          "red_ss_ptr, tiles_ready, tiles_free,\n                  WG: gl.constexpr") \
        if "red_ss_ptr, tiles_ready,\n                  WG" in source else source
    source = replace_once(source, "                          A_K_CONTIGUOUS, B_N_CONTIGUOUS)),\n",
                          "                          A_K_CONTIGUOUS, B_N_CONTIGUOUS, op_residual_chunk_desc, "
                          f"op_residual_bufs, tiles_ready, tiles_free, EPILOGUE_SPLIT, {rows})),\n")
    return source


def chunked_plan(prog, launch, rows: int) -> km.Plan:
    write = km._source_file
    km._source_file = lambda filename, source: write(
        filename.replace(".py", f"_chunk{rows}.py"), chunked_source(source, rows))
    try:
        kernel = prog.triton._build(km._signature(launch, "pingpong"), "pingpong")
    finally:
        km._source_file = write
    return km.Plan(kernel, CONFIG, launch)


def offline(rows_list: list[int]) -> None:
    import test_hopper_compiles as th
    km._num_sms = lambda device: 132
    m, n, k, bf16 = 16384, 3072, 768, torch.bfloat16
    prog = coda.compile(PROGRAM)
    launch = prog.bind(torch.empty(m, k, dtype=bf16), torch.empty(n, k, dtype=bf16).T, seed=1,
                       residual=torch.empty(m, n, dtype=bf16))
    built = prog.triton._build(km._signature(launch, "pingpong"), "pingpong")
    print("as built", json.dumps(th.compile_sm90(km, built, CONFIG, launch)), flush=True)
    for rows in rows_list:
        write = km._source_file
        km._source_file = lambda filename, source, r=rows: write(
            filename.replace(".py", f"_chunk{r}.py"), chunked_source(source, r))
        try:
            built = prog.triton._build(km._signature(launch, "pingpong"), "pingpong")
        finally:
            km._source_file = write
        print(f"chunk{rows}", json.dumps(th.compile_sm90(km, built, CONFIG, launch)), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--offline", action="store_true")
    parser.add_argument("--rows", default="16,32,64")
    parser.add_argument("--shapes", default="16384x3072x768,16384x8192x2048")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json")
    args = parser.parse_args()
    rows_list = [int(r) for r in args.rows.split(",")]
    if args.offline:
        return offline(rows_list)
    torch.manual_seed(0)
    prog = coda.compile(PROGRAM)
    results = []
    for shape in args.shapes.split(","):
        m, n, k = (int(x) for x in shape.split("x"))
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16) / k**0.5
        launch = prog.bind(a, b, seed=1, residual=torch.randn(m, n, device="cuda", dtype=torch.bfloat16))
        plain = PLAIN.triton.plan(PLAIN.bind(a, b), CONFIG)
        plans = {"c": prog.triton.plan(launch, CONFIG),
                 "c_l2": ap.edited_plan(prog, launch, CONFIG, ap.EDITS["l2"]),
                 **{f"c_chunk{rows}": chunked_plan(prog, launch, rows) for rows in rows_list}}
        reference = plans["c"].run(a, b, launch.values, None, 1)   # kept: no output reuses it
        same = {}
        for label, plan in plans.items():
            if label not in ("c", "c_l2"):
                got = plan.run(a, b, launch.values, None, 1)
                same[label] = all(torch.equal(got[name], ref) for name, ref in reference.items())
        print(shape, "bitwise equal to (c):", same, flush=True)
        run = {"plain": lambda p=plain: p.run(a, b, {}, None, 0)}
        run |= {label: (lambda p=plan: p.run(a, b, launch.values, None, 1)) for label, plan in plans.items()}
        us, times = ap.timed_rounds(run, args.rounds, ap.event_us)
        ratios = {label: round(t / us["plain"], 3) for label, t in us.items()}
        print(json.dumps(dict(shape=shape, us=us, over_plain=ratios)), flush=True)
        results.append(dict(shape=shape, us=us, us_rounds=times, bitwise_equal=same))
    if args.json:
        meta = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, command=" ".join(sys.argv))
        Path(args.json).write_text(json.dumps(dict(meta, rows=results), indent=1))


if __name__ == "__main__":
    main()
