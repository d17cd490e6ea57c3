"""GEMM + epilogue benchmark: CODA against cuBLAS, cuBLASLt, eager PyTorch and torch.compile.

    python benchmarks/gemm.py [--shapes 16384x3072x768,...] [--cases plain,bias_gelu,...]
                              [--no-compile] [--rounds 5] [--json benchmarks/results/gemm.json]

Runs every competitor side by side in one process on one GPU, bf16 operands, B given as an
nn.Linear weight (W [N, K], B = W.T). Times are medians of `triton.testing.do_bench`; the cuBLAS
plain GEMM, every ratio's reference, is timed before each case and the median taken. The
`cublaslt` column is the vendor's own fused form where it has one: cuBLASLt's bias+GELU epilogue,
and for `residual` cuBLAS's GEMM with beta = 1 reading the residual as C (in place, no copy).

On Hopper, CODA's two sm_90 mainloops are also timed one by one, launched through a ready
`Plan` (no per-call binding): `coda_hopper` (the persistent Triton kernel in its heuristic
configuration) and `coda_pingpong` (the warp-specialized Gluon kernel, best of its candidate
configurations, each recorded as `coda_pingpong/<config>`). Each case's fastest CODA kernel is
then timed back to back with the fastest plain one, `--rounds` times, in alternating order
(`coda_over_plain_paired`: the ratios and their median, what docs/performance.md's fast-path
table reports); the plain kernel is paired with itself as well, a control of the method. The
vendor's fused forms are paired with cuBLAS's plain GEMM in the same way
(`cublaslt_over_cublas_paired`).
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
import triton.testing
from triton.runtime.errors import OutOfResources

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
import side_by_side  # benchmarks/, beside this script

import coda

SHAPES = [(16384, 3072, 768), (16384, 768, 3072), (8192, 11008, 4096), (8192, 4096, 11008),
          (16384, 8192, 2048), (4096, 4096, 4096), (8192, 8192, 8192)]
P = 0.1

CASES = {
    "plain": dict(
        coda="output = input;",
        eager=lambda a, w, o: a @ w.T,
        lt=None),
    "bias_gelu": dict(
        coda="EPILOGUE(bias: col) { output = gelu(input + bias); }",
        eager=lambda a, w, o: F.gelu(a @ w.T + o["bias"], approximate="tanh"),
        lt=lambda a, w, o: torch._addmm_activation(o["bias"], a, w.T, use_gelu=True)),
    "bias_gelu_dropout_residual": dict(
        coda="EPILOGUE(bias: col, residual: tile, p: scalar) "
             "{ output = dropout(gelu(input + bias), p) + residual; }",
        eager=lambda a, w, o: F.dropout(F.gelu(a @ w.T + o["bias"], approximate="tanh"), P)
        + o["residual"],
        lt=None),
    "residual_rowsumsq": dict(
        coda="EPILOGUE(residual: tile) { output = input + residual; ss = row_sum(output * output); }",
        eager=lambda a, w, o: _residual_rms(a @ w.T + o["residual"]),
        lt=None),
    "rowscale_swiglu": dict(
        coda="EPILOGUE(rstd: row) { gate, up = unpack(input * rstd); output = silu(gate) * up; }",
        eager=lambda a, w, o: _swiglu((a @ w.T) * o["rstd"][:, None]),
        lt=None),
    # (c) and (e) taken apart: which part of a fused epilogue costs what
    "residual": dict(
        coda="EPILOGUE(residual: tile) { output = input + residual; }",
        eager=lambda a, w, o: a @ w.T + o["residual"],
        lt=lambda a, w, o: o["c_in_place"].addmm_(a, w.T)),
    "rowsumsq": dict(
        coda="output = input; ss = row_sum(input * input);",
        eager=lambda a, w, o: _residual_rms(a @ w.T),
        lt=None),
    "dgelu": dict(
        coda="EPILOGUE(pre: tile) { output = input * gelu_grad(pre); }",
        eager=lambda a, w, o: torch.ops.aten.gelu_backward(a @ w.T, o["pre"], approximate="tanh"),
        lt=None),
    "dgelu_bias_grad": dict(
        coda="EPILOGUE(pre: tile) { output = input * gelu_grad(pre); db = col_sum(output); }",
        eager=lambda a, w, o: _dgelu_bias_grad(a @ w.T, o["pre"]),
        lt=None),
}


def _residual_rms(y):
    return y, y.float().square().sum(1)


def _swiglu(h):
    return F.silu(h[:, 0::2]) * h[:, 1::2]


def _dgelu_bias_grad(dy, pre):
    dx = torch.ops.aten.gelu_backward(dy, pre, approximate="tanh")
    return dx, dx.float().sum(0)


def operands(m: int, n: int) -> dict:
    dev, dt = "cuda", torch.bfloat16
    residual = torch.randn(m, n, device=dev, dtype=dt)
    return {"bias": torch.randn(n, device=dev, dtype=dt), "residual": residual,
            "c_in_place": residual.clone(),  # cuBLAS's beta = 1 GEMM adds into it
            "pre": torch.randn(m, n, device=dev, dtype=dt), "rstd": torch.rand(m, device=dev, dtype=dt) + 0.5,
            "p": P}


def inputs(m: int, n: int, k: int) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """A shape's A [M, K], weight W [N, K] (B = W.T) and every case's epilogue operands, from
    seed 0: the same values for every script that times these cases."""
    torch.manual_seed(0)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k**0.5
    return a, w, operands(m, n)


def used_operands(prog, ops: dict) -> dict:
    """The operands among `ops` that `prog` declares."""
    return {name: value for name, value in ops.items() if name in prog.ir.params}


def bench(fn, warmup: int = 25, rep: int = 100) -> float:
    return triton.testing.do_bench(fn, warmup=warmup, rep=rep, return_mode="median")


def mainloop_runs(prog, a, b, used: dict) -> dict[str, Callable[[], object]]:
    """CODA's sm_90 mainloops one by one, each launched through a ready Plan: `coda_hopper` and
    every ping-pong candidate `coda_pingpong/<config>` (none where CODA would not take them)."""
    from coda.codegen import tuning

    launch = prog.bind(a, b, seed=1, **used)
    if prog.triton.kernel(launch).variant != "hopper":
        return {}

    def run_plan(config) -> Callable[[], object] | None:
        try:
            plan, _ = prog.triton.start(launch, config)
        except OutOfResources:  # this program's staging buffers and this ring exceed shared memory
            return None
        return lambda: plan.run(launch.a, launch.b, launch.values, None, launch.seed)

    m, n, k = launch.m, launch.n, launch.k
    runs = {"coda_hopper": run_plan(tuning.heuristic("hopper", m, n, k, pingpong=False))}
    for config in tuning.CANDIDATES["hopper"]:
        if config.pingpong:
            label = f"coda_pingpong/{config.block_m}x{config.block_n}x{config.block_k}" \
                    f"s{config.num_stages}e{config.split_epilogue}{'x' * config.share_tiles}"
            runs[label] = run_plan(config)
    return {label: run for label, run in runs.items() if run is not None}


def paired_ratios(run: Callable[[], object], plain: Callable[[], object], rounds: int) -> list[float]:
    """A fused kernel's time over the plain one's, timed back to back `rounds` times: under the
    H200's power cap the clock drifts by up to 10% within a shape's cases (docs/performance.md),
    and a ratio of two timings taken a minute apart carries that drift; one of neighbours does not.
    Each round times them in the order plain, run, run, plain (run, plain, plain, run in odd
    rounds) and divides the sums: the clock keeps sinking while a GEMM runs back to back at the
    cap, so a fixed order of two timings would count that against whichever comes second, and
    this order cancels a steady drift exactly."""
    ratios = []
    for i in range(rounds):
        first, second = (plain, run) if i % 2 == 0 else (run, plain)
        times = [bench(fn, warmup=10, rep=40) for fn in (first, second, second, first)]
        outer, inner = times[0] + times[3], times[1] + times[2]
        ratios.append(inner / outer if i % 2 == 0 else outer / inner)
    return ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default=",".join("x".join(map(str, s)) for s in SHAPES))
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    parser.add_argument("--json", default="benchmarks/results/gemm.json")
    parser.add_argument("--rounds", type=int, default=5,
                        help="back-to-back timings of each case's fastest CODA kernel and the plain one "
                             "(0: none)")
    args = parser.parse_args()
    side_by_side.require_gpu("benchmarks/gemm.py")
    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")]
    cases = args.cases.split(",")
    programs = {c: coda.compile(CASES[c]["coda"]) for c in cases}
    rows = []
    for m, n, k in shapes:
        a, w, ops = inputs(m, n, k)
        flops = 2 * m * n * k
        # cuBLAS's plain GEMM is timed again before every case and its median is the shape's
        # reference: under the H200's power cap the clock drifts within a shape's cases (a first
        # timing on a cool GPU measured 346 us where the same call took 393 us a minute later)
        cublas_runs, timed, fastest, vendor = [], [], {}, {}
        for case in cases:
            spec, prog = CASES[case], programs[case]
            cublas_runs.append(bench(lambda a=a, w=w: a @ w.T))
            used = used_operands(prog, ops)
            coda_runs = {"coda": lambda prog=prog, used=used: prog(a, w.T, seed=1, **used),
                         **mainloop_runs(prog, a, w.T, used)}
            timings = {label: bench(run) for label, run in coda_runs.items()}
            pingpong = [label for label in timings if label.startswith("coda_pingpong/")]
            if pingpong:
                timings["coda_pingpong"] = min(timings[label] for label in pingpong)
            fastest[case] = coda_runs[min(coda_runs, key=timings.get)]
            timings["eager"] = bench(lambda: spec["eager"](a, w, ops))
            if spec["lt"] is not None:
                vendor[case] = lambda spec=spec: spec["lt"](a, w, ops)
                timings["cublaslt"] = bench(vendor[case])
            if not args.no_compile:
                compiled = torch.compile(spec["eager"], dynamic=False)
                compiled(a, w, ops)
                timings["torch_compile"] = bench(lambda: compiled(a, w, ops))
            timed.append((case, timings))
            line = "  ".join(f"{impl} {ms * 1e3:7.1f}us" for impl, ms in timings.items() if "/" not in impl)
            print(f"{m}x{n}x{k} {case:28s} cublas {cublas_runs[-1] * 1e3:7.1f}us  {line}", flush=True)
        cublas = statistics.median(cublas_runs)
        for case, timings in timed:
            for impl, ms in timings.items():
                rows.append(dict(shape=[m, n, k], case=case, impl=impl, ms=ms,
                                 tflops=flops / ms / 1e9, over_cublas=ms / cublas))
        rows.append(dict(shape=[m, n, k], case="plain", impl="cublas", ms=cublas, runs=cublas_runs,
                         tflops=flops / cublas / 1e9, over_cublas=1.0))
        if args.rounds and "plain" in fastest:
            # the plain kernel against itself too: what the pairing reads where nothing differs
            for case, run in fastest.items():
                ratios = paired_ratios(run, fastest["plain"], args.rounds)
                ratio = statistics.median(ratios)
                rows.append(dict(shape=[m, n, k], case=case, impl="coda_over_plain_paired",
                                 ratio=ratio, ratios=ratios))
                print(f"{m}x{n}x{k} {case:28s} over plain, paired: median {ratio:.3f} of "
                      f"{[round(r, 3) for r in ratios]}", flush=True)
        if args.rounds:
            # the vendor's fused form over its own plain GEMM, paired the same way: what the
            # epilogue costs cuBLAS, beside what it costs CODA
            for case, run in vendor.items():
                ratios = paired_ratios(run, lambda: a @ w.T, args.rounds)
                ratio = statistics.median(ratios)
                rows.append(dict(shape=[m, n, k], case=case, impl="cublaslt_over_cublas_paired",
                                 ratio=ratio, ratios=ratios))
                print(f"{m}x{n}x{k} {case:28s} cuBLAS's over cuBLAS plain, paired: median {ratio:.3f} of "
                      f"{[round(r, 3) for r in ratios]}", flush=True)
        print(f"{m}x{n}x{k} cublas median {cublas * 1e3:.1f}us of {len(cublas_runs)} timings "
              f"({min(cublas_runs) * 1e3:.1f}-{max(cublas_runs) * 1e3:.1f})", flush=True)
        write(Path(args.json), rows)   # after every shape: a run cut short keeps what it measured
    print(f"wrote {args.json}")


def write(path: Path, rows: list[dict]) -> None:
    result = dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__,
                  triton=triton.__version__, python=platform.python_version(),
                  date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                  command="python " + " ".join(sys.argv), results=rows)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
