"""The generated finishing kernel (codegen/finish.py) against torch in float64, through the
Triton interpreter on the CPU: every reduction kind of one launch in one kernel, partial counts of
1, below, at and over one step of the merge (128 partials: 32-wide interpreter tiles), rows whose
values are all -inf, a NaN, and the half-width domain of `unpack`."""

from __future__ import annotations

import math
import threading

import pytest
import torch

import coda
from coda.codegen.finish import merge_tile

ALL = coda.compile("EPILOGUE all() { output = input; s = row_sum(input); top = row_max(input);"
                   " lse = row_logsumexp(input); cs = col_sum(input); cm = col_max(input); }")


def reference(x: torch.Tensor) -> dict[str, torch.Tensor]:
    x = x.double()
    return {"s": x.sum(1), "top": x.amax(1), "lse": torch.logsumexp(x, 1), "cs": x.sum(0), "cm": x.amax(0)}


# (rows, columns): 1 partial; 5 and 34 partials; 132 partials each way (two steps of 128)
@pytest.mark.parametrize(("m", "n"), [(1, 1), (150, 37), (40, 1061), (3, 4200), (4200, 3)])
def test_every_reduction_of_a_launch_matches_float64(m, n):
    x = torch.randn(m, n, generator=torch.Generator().manual_seed(m + n)) * 10
    out = ALL.map(x, outputs=["s", "top", "lse", "cs", "cm"])
    for key, want in reference(x).items():
        torch.testing.assert_close(out[key].double(), want, rtol=1e-5, atol=1e-4, msg=key)


def test_minus_infinity_and_nan_rows():
    x = torch.randn(40, 70, generator=torch.Generator().manual_seed(1))
    x[0] = -math.inf            # every partial empty: -inf, as torch.logsumexp gives
    x[1, 40:] = -math.inf       # whole tiles empty among finite ones: ignored
    x[2, 5] = math.nan          # NaN propagates
    out = ALL.map(x, outputs=["lse", "s"])
    want = reference(x)
    assert out["lse"][0].item() == -math.inf
    assert math.isnan(out["lse"][2].item()) and math.isnan(out["s"][2].item())
    keep = [i for i in range(40) if i not in (0, 2)]
    torch.testing.assert_close(out["lse"][keep].double(), want["lse"][keep], rtol=1e-6, atol=1e-5)


def test_half_width_column_sums():
    prog = coda.compile("EPILOGUE halves() { gate, up = unpack(input); output = gate * up;"
                        " cg = col_sum(gate); cu = col_max(up); }")
    x = torch.randn(130, 70, generator=torch.Generator().manual_seed(2))
    out = prog.map(x, outputs=["cg", "cu"])
    torch.testing.assert_close(out["cg"].double(), x[:, 0::2].double().sum(0), rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(out["cu"].double(), x[:, 1::2].double().amax(0))


def test_merge_tile_covers_few_and_many_partials():
    assert merge_tile(1) == (1, 2048)
    assert merge_tile(24) == (32, 64)
    assert merge_tile(1571) == (128, 16)


COMPILE_SM90 = """
import json, torch, triton, coda
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from coda.codegen import kernel as kernel_module
from coda.codegen.finish import merge_tile
prog = coda.compile("EPILOGUE all() { output = input; s = row_sum(input); lse = row_logsumexp(input);"
                    " cm = col_max(input); }")
launch = prog.bind(torch.empty(64, 64, dtype=torch.bfloat16), torch.empty(64, 64, dtype=torch.bfloat16))
fn = prog.triton._build(kernel_module._signature(launch, "hopper"), "hopper").finish
found = {}
for parts, limited in ((24, False), (1571, False), (24, True)):   # limited: under an m_limit
    p, block = merge_tile(parts)
    meta = dict(ROW_P=p, ROW_BLOCK=block, COL_P=p, COL_BLOCK=block, LIMIT_M=limited, TILE_M=128)
    types = {"M": "i32", "N": "i32", "row_parts": "i32", "col_parts": "i32", "M_LIMIT": "*i32"}
    signature = {a: "constexpr" if a in meta else types.get(a, "*fp32") for a in fn.arg_names}
    source = ASTSource(fn, signature, constexprs=meta)
    ptx = triton.compile(source, target=GPUTarget("cuda", 90, 32)).asm["ptx"]
    found[f"{parts}{'_limited' * limited}"] = dict(ex2="ex2.approx" in ptx, stores=ptx.count("st.global"))
print(json.dumps(found))
"""


def test_finish_kernel_compiles_for_sm90():
    """The interpreter is not the GPU compiler: the finishing kernel must also compile for sm_90
    (in a subprocess: the test session's Triton runs in interpreter mode, fixed at import)."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("triton.backends.nvidia", reason="this Triton has no NVIDIA backend")
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, TRITON_INTERPRET="0", PYTHONPATH=str(root / "src"))
    done = subprocess.run([sys.executable, "-c", COMPILE_SM90], env=env, capture_output=True,
                          text=True, timeout=300, cwd=root)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    for parts in ("24", "1571", "24_limited"):
        assert found[parts]["ex2"] and found[parts]["stores"] >= 3, found   # lse's exp, 3 results


def test_kept_partial_buffers_serve_launch_after_launch(monkeypatch):
    """A plan keeps its partial buffers and reuses them (stream order keeps launches apart):
    three launches in a row of one layout, each result right; above KEPT_PARTIAL_BYTES the
    buffers are fresh for each launch."""
    from coda.codegen import kernel

    for limit in (kernel.KEPT_PARTIAL_BYTES, 0):
        monkeypatch.setattr(kernel, "KEPT_PARTIAL_BYTES", limit)
        prog = coda.compile("EPILOGUE kept() { output = input; s = row_sum(input);"
                            " lse = row_logsumexp(input); cs = col_sum(input); }")
        results = []
        for seed in range(3):
            x = torch.randn(70, 90, generator=torch.Generator().manual_seed(seed)) * 4
            results.append((x, prog.map(x, outputs=["s", "lse", "cs"])))
        (plan,) = prog._plans.values()
        assert plan.keep_partials == (limit > 0) and len(plan.kept_partials) == (limit > 0)
        for x, out in results:   # each launch's finished sums are its own, after later launches
            want = reference(x)
            for key in ("s", "lse", "cs"):
                torch.testing.assert_close(out[key].double(), want[key], rtol=1e-5, atol=1e-4, msg=key)


def test_kept_partial_buffers_are_each_host_threads_own():
    """Two host threads launching one plan on one stream could enqueue kernel, kernel, finish,
    finish: each thread keeps its own set of partial buffers (one thread, one set, launch after
    launch)."""
    import threading

    prog = coda.compile("EPILOGUE kept_threads() { output = input; s = row_sum(input); }")
    prog.map(torch.randn(40, 50), outputs=["s"])
    (plan,) = prog._plans.values()
    cpu = torch.device("cpu")
    mine = plan._partials(cpu)
    theirs = []
    worker = threading.Thread(target=lambda: theirs.extend([plan._partials(cpu), plan._partials(cpu)]))
    worker.start()
    worker.join()
    assert plan._partials(cpu) is mine and theirs[0] is theirs[1] and theirs[0] is not mine


def test_two_host_threads_launch_at_once_under_the_interpreter():
    """The interpreter keeps a launch's grid in globals: two threads launching together failed
    inside it (raw InterpreterErrors, 5 of 8 launches) or read each other's grid. Launches take
    turns on the CPU now; each thread's results are its own."""
    import threading

    prog = coda.compile("EPILOGUE threads(bias: col) { output = input + bias; s = row_sum(output); }")
    errors, results = [], {}

    def work(seed: int, m: int, n: int) -> None:
        g = torch.Generator().manual_seed(seed)
        try:
            for i in range(3):
                a, b = torch.randn(m, 16, generator=g), torch.randn(16, n, generator=g)
                bias = torch.randn(n, generator=g)
                results[seed, i] = prog(a, b, bias=bias, backend="triton"), a @ b + bias
        except Exception as err:   # whatever a thread met, reported below
            errors.append(err)

    threads = [threading.Thread(target=work, args=args) for args in ((1, 64, 96), (2, 33, 40))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    assert len(results) == 6
    for got, want in results.values():
        torch.testing.assert_close(got["output"], want, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(got["s"], want.sum(1), rtol=1e-5, atol=1e-4)


def test_reductions_stored_in_another_dtype_are_the_float32_result_rounded_once():
    """dtypes= on the Triton kernels (interpreter): the finishing kernel sums in float32 and
    rounds once to the stored dtype, as `.to()` of the float32 result would; the plans of the
    two layouts are kept apart. (float16: the interpreter truncates bfloat16; the GPU tests
    check bfloat16.)"""
    x = torch.randn(150, 70, generator=torch.Generator().manual_seed(3)) * 10
    wide = ALL.map(x, outputs=["s", "cs", "lse"])
    half = ALL.map(x, outputs=["s", "cs", "lse"], dtypes={"s": torch.float16, "cs": torch.float16})
    assert (half["s"].dtype, half["cs"].dtype, half["lse"].dtype) == (torch.float16, torch.float16,
                                                                      torch.float32)
    assert torch.equal(half["s"], wide["s"].to(torch.float16))
    assert torch.equal(half["cs"], wide["cs"].to(torch.float16))
    assert torch.equal(half["lse"], wide["lse"])


@pytest.mark.parametrize(("outputs", "finishes"), [(["s", "top"], False), (["s", "top", "cs"], True),
                                                  (["s", "lse"], True)])
def test_row_reductions_one_tile_wide_need_no_finishing_kernel(outputs, finishes, monkeypatch):
    """Where one column tile holds a whole row (here 24 columns, the interpreter's tiles 32 wide)
    its partial of a row sum or maximum is the result: the kernel writes it in place and no
    finishing kernel runs, unless the launch has reductions that need one (column sums, a
    log-sum-exp's two partials); under an m_limit, the rows before it are right."""
    from coda.codegen import kernel

    calls = []
    finisher = kernel._Finisher.__call__
    monkeypatch.setattr(kernel._Finisher, "__call__", lambda self, buffers, device:
                        calls.append(1) or finisher(self, buffers, device))
    x = torch.randn(70, 24, generator=torch.Generator().manual_seed(4)) * 5
    want = reference(x)
    for _ in range(2):
        out = ALL.map(x, outputs=outputs)
        for key in outputs:
            torch.testing.assert_close(out[key].double(), want[key], rtol=1e-5, atol=1e-4, msg=key)
    assert bool(calls) == finishes
    limited = ALL.map(x, outputs=["s"], m_limit=torch.tensor([33]))["s"]
    torch.testing.assert_close(limited[:33].double(), want["s"][:33], rtol=1e-5, atol=1e-4)


def test_kept_partial_buffers_go_with_their_thread():
    """A plan keeps a set of partial buffers per host thread and stream; a thread that has ended
    launches no more, and its set went only with the plan (up to KEPT_PARTIAL_BYTES each, one
    per thread that ever launched: an audit's find). Four threads alive at once, each launching
    (one at a time: the interpreter is not thread-safe): their sets go when they end, and every
    result is right."""
    import gc
    import weakref

    prog = coda.compile("EPILOGUE kept_by_thread() { output = input; s = row_sum(input); }")
    x = torch.randn(40, 50, generator=torch.Generator().manual_seed(0))
    results = [prog.map(x, outputs=["s"])["s"]]
    (plan,) = prog._plans.values()
    kept, one_at_a_time, all_launched = [], threading.Lock(), threading.Barrier(4)

    def launch() -> None:
        with one_at_a_time:
            results.append(prog.map(x, outputs=["s"])["s"])
            kept.extend(weakref.ref(t) for buffers in plan.kept_partials.values()
                        for parts in buffers.values() for t in parts)
        all_launched.wait(30)   # alive together: four threads, four sets

    threads = [threading.Thread(target=launch) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    gc.collect()
    assert kept and all(ref() is None for ref in kept)
    assert len(plan.kept_partials) == 1   # the main thread's
    for got in results:
        torch.testing.assert_close(got.double(), x.double().sum(1), rtol=1e-5, atol=1e-5)


def test_logsumexp_takes_no_log_of_zero_for_rows_past_m():
    """The finishing kernel's log-sum-exp took log(0) on the padded lanes past M (then replaced
    by -inf): under the interpreter numpy warned "divide by zero" on every launch."""
    import warnings

    prog = coda.compile("EPILOGUE lse_rows() { output = input; lse = row_logsumexp(input); }")
    x = torch.randn(37, 50, generator=torch.Generator().manual_seed(2))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        got = prog.map(x, outputs=["lse"], backend="triton")["lse"]
    torch.testing.assert_close(got, torch.logsumexp(x, 1), rtol=1e-5, atol=1e-5)
