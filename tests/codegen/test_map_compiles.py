"""The map kernel compiled for sm_90 on a machine without a GPU: at a ragged width (GPT-2's
50257-column cross-entropy block, rows padded to 50272) its whole column blocks load and store
16 bytes at a time. Masked on the ragged column everywhere, as before the eighth session, every
access was a 2-byte one, and the gradient map ran at 0.95 TB/s instead of 3.1 on the H200
(benchmarks/results/session8/run2/map_merge.log). A map over a Concat compiles too, its loads as
wide."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest


def compile_map(rows: int, vocab: int, stride: int) -> dict[str, int]:
    """Vector and scalar global loads and stores in the PTX of the cross-entropy's gradient map
    over a [rows, vocab] view with row stride `stride` (run with TRITON_INTERPRET=0)."""
    import torch

    from coda.codegen.tuning import MAP_CONFIGS
    from coda.ops.cross_entropy import grad_program

    prog = grad_program(False, False, False, "round_bf16")
    block = torch.empty(rows * stride, dtype=torch.bfloat16).view(rows, stride)[:, :vocab]
    rowvec = torch.empty(rows)
    launch = prog.bind(block, None, out=block, target=rowvec, offset=0.0, lse=rowvec, alpha=rowvec,
                       hit=1.0, smooth=0.0)
    ptx = map_ptx(prog, launch, MAP_CONFIGS["tile"])
    # `ld.global.v4.b32 {...}`: four 32-bit words; `ld.global.b16 %rs1`: one bf16 value
    patterns = {"v4": r"[\w.]*\.v4\.", "b16": r"[\w.]*\.b16\s"}
    return {f"{kind}_{width}": len(re.findall(rf"{kind}\.global{pattern}", ptx))
            for kind in ("ld", "st") for width, pattern in patterns.items()}


def compile_concat_map() -> dict[str, int]:
    """16-byte loads in the PTX of the column sums of three [4096, 768] pieces (GPT-2's q, k and
    v gradients, `ops.common.column_sum` of a Concat): each tile reads its piece."""
    import torch

    import coda
    from coda.codegen.tuning import MAP_CONFIGS
    from coda.ops.common import SUMS

    parts = [torch.empty(4096, 768, dtype=torch.bfloat16) for _ in range(3)]
    launch = SUMS.bind(coda.Concat(parts, 1), None, outputs=["cols"])
    return {"ld_v4": len(re.findall(r"ld\.global[\w.]*\.v4\.", map_ptx(SUMS, launch, MAP_CONFIGS["sums"])))}


def map_ptx(prog, launch, config) -> str:
    """The PTX of `prog`'s map kernel for `launch` in `config`, its arguments specialized as
    Triton specializes them."""
    import torch
    import triton
    from test_hopper_compiles import Recorder, _type
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from coda.codegen import kernel as kernel_module

    built = prog.triton._build(kernel_module._signature(launch, "map"), "map")
    recorder = Recorder(built.fn.arg_names)
    finish = built.finish and Recorder(built.finish.arg_names)   # nor the reductions' finish
    kernel_module.Plan(kernel_module.Kernel("map", built.source, recorder, finish), config,
                       launch).run(launch.concat or launch.a, None, launch.values, launch.out, launch.seed,
                                   (launch.m_limit, None))
    meta = dict(recorder.meta)
    options = {key: meta.pop(key) for key in ("num_warps", "num_stages") if key in meta}
    names = [p for p in built.fn.arg_names if p not in meta]
    values = dict(zip(names, recorder.args, strict=True))
    # Triton's specialization of the arguments: integers equal to 1 become constants, integers
    # divisible by 16 and 16-byte aligned pointers carry that divisibility
    attrs = {}
    for index, name in enumerate(built.fn.arg_names):
        value = values.get(name)
        if isinstance(value, int) and value == 1:
            meta[name] = 1
        elif isinstance(value, torch.Tensor) or (isinstance(value, int) and value % 16 == 0):
            attrs[(index,)] = [["tt.divisibility", 16]]
    signature = {p: "constexpr" if p in meta else _type(values[p]) for p in built.fn.arg_names}
    source = ASTSource(built.fn, signature, constexprs=meta, attrs=attrs)
    return triton.compile(source, target=GPUTarget("cuda", 90, 32), options=options).asm["ptx"]


@pytest.fixture(scope="module")
def compiled() -> dict[str, dict[str, int]]:
    """Both maps compiled once, in a subprocess (the test session's Triton interprets)."""
    pytest.importorskip("triton.backends.nvidia", reason="this Triton has no NVIDIA backend")
    env = dict(os.environ, TRITON_INTERPRET="0")
    done = subprocess.run([sys.executable, __file__], env=env, capture_output=True, text=True,
                          timeout=600, cwd=Path(__file__).resolve().parents[2])
    if done.returncode != 0 and "ptxas" in done.stderr.lower():
        pytest.skip(f"Triton cannot run ptxas here: {done.stderr[-300:]}")
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_map_of_a_ragged_padded_block_vectorizes(compiled):
    counts = compiled["ragged"]
    # whole column blocks: 16-byte loads and stores of the block
    assert counts["ld_v4"] > 0 and counts["st_v4"] > 0, counts
    # the last, ragged block still masks column by column
    assert counts["ld_b16"] > 0 and counts["st_b16"] > 0, counts


def test_map_over_a_concat_compiles_and_vectorizes(compiled):
    assert compiled["concat"]["ld_v4"] > 0, compiled


if __name__ == "__main__":
    print(json.dumps({"ragged": compile_map(2560, 50257, 50272), "concat": compile_concat_map()}))
