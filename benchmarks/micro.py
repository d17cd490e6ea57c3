"""Per-op benchmark: every CODA op, forward and forward+backward, against its peers on one GPU.

    python benchmarks/micro.py [--sizes gpt2,llama1b,llama7b] [--ops linear_gelu,...]
                               [--max-autotune gpt2] [--together 21] [--json benchmarks/results/micro.json]

For each op (docs/ops.md) and model size it times, in one process, bf16:
  eager          the unfused PyTorch formula
  compile        torch.compile of that formula (default mode)
  max_autotune   torch.compile(mode="max-autotune-no-cudagraphs"), at the sizes in --max-autotune
  cublaslt       cuBLASLt's fixed epilogue (torch._addmm_activation), where one exists (forward)
  liger          Liger Kernel, where it has the op (its kernel + cuBLAS for the GEMM)
  coda           the coda.ops function
"fwd" is the training forward (autograd recording, what a step runs); "fwd_bwd" adds the
backward with a fixed upstream gradient. Also per op: the time cuBLAS needs for the op's GEMMs
alone (`gemm_floor`: the limit a fused op approaches), peak memory of fwd+bwd above the inputs,
and, from one profiled fwd+bwd, the summed GPU kernel time and kernel count (to tell GPU time
from host overhead), and `graph_ms`: the fwd+bwd replayed from a CUDA graph, which takes the
host's launch cost out (what a step captured in a graph, or one large enough to keep the GPU
queue full, sees). Times are medians of `triton.testing.do_bench`. CODA's speed-up over the
best peer is summarized twice: as called (`summary`: host included, what an uncaptured step
sees) and replayed (`summary_replayed`: every fwd+bwd from a CUDA graph; Liger, which cannot
be captured, with its kernels' summed time).

Each op x size case runs in its own process (benchmarks/side_by_side.py): --together cases at a
time build their tensors and run every pass once (compilation: on a fresh machine most of the
time), side by side; then they are timed one at a time on an otherwise idle GPU. Where CODA
autotunes (CODA_AUTOTUNE on, the default; run_all.sh sets it to 0) or Inductor does
(--max-autotune sizes), the cases run one at a time: tuning times kernels.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import math
import platform
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import side_by_side  # benchmarks/, beside this script
import torch
import torch.nn.functional as F
import triton
import triton.testing
from report import replay_ms  # benchmarks/, beside this script: how a row's replay is timed
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from coda import ops

BF16 = torch.bfloat16


@dataclass(frozen=True)
class Size:
    tokens: int
    hidden: int
    ffn: int
    heads: int
    kv_heads: int
    vocab: int


SIZES = {"gpt2": Size(16384, 768, 3072, 12, 12, 50257),
         "llama1b": Size(16384, 2048, 8192, 32, 8, 128256),
         "llama7b": Size(8192, 4096, 11008, 32, 32, 32000)}


@dataclass
class Case:
    """One op at one size: the competitors (each returns a tensor or a tuple of tensors), the
    tensors to differentiate, and the (M, N, K) of the GEMMs a fwd / fwd+bwd needs at least."""
    impls: dict[str, Callable]
    grads_of: list[torch.Tensor]
    gemms_fwd: list[tuple[int, int, int]]
    gemms_bwd: list[tuple[int, int, int]]
    no_backward: set[str] = field(default_factory=set)
    compare: int = 0   # which output the CODA-vs-eager sanity check compares


def param(*shape: int, scale: float | None = None) -> torch.Tensor:
    scale = shape[-1] ** -0.5 if scale is None else scale
    return (torch.randn(shape, device="cuda") * scale).to(BF16).requires_grad_()


def linear_back(m: int, n: int, k: int) -> list[tuple[int, int, int]]:
    """The backward GEMMs of y[m, n] = x[m, k] @ w.T: dx [m, k] and dw [n, k]."""
    return [(m, k, n), (n, k, m)]


def rope_rotate_half(t: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """HuggingFace's RoPE: t [..., S, heads, d], cos/sin [S, 1, d]."""
    half = t.shape[-1] // 2
    rotated = torch.cat((-t[..., half:], t[..., :half]), dim=-1)
    return t * cos + rotated * sin


def linear_gelu(s: Size, liger) -> Case:
    t, h, f = s.tokens, s.hidden, s.ffn
    x, w, b = param(t, h, scale=1.0), param(f, h), param(f, scale=0.1)

    def eager():
        return F.gelu(F.linear(x, w, b), approximate="tanh")
    return Case({"eager": eager,
                 "cublaslt": lambda: torch._addmm_activation(b, x, w.T, use_gelu=True),
                 "coda": lambda: ops.linear(x, w, b, activation="gelu")},
                [x, w, b], [(t, f, h)], linear_back(t, f, h), no_backward={"cublaslt"})


def rms_norm_linear(s: Size, liger) -> Case:
    t, h, n = s.tokens, s.hidden, (s.heads + 2 * s.kv_heads) * (s.hidden // s.heads)
    x, g, w = param(t, h, scale=1.0), param(h, scale=1.0), param(n, h)
    impls = {"eager": lambda: F.linear(F.rms_norm(x, (h,), g, 1e-6), w),
             "coda": lambda: ops.rms_norm_linear(x, g, w, 1e-6)}
    if liger:
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction
        impls["liger"] = lambda: F.linear(LigerRMSNormFunction.apply(x, g, 1e-6, 0.0, "llama", False), w)
    return Case(impls, [x, g, w], [(t, n, h)], linear_back(t, n, h))


def layer_norm_linear(s: Size, liger) -> Case:
    t, h, n = s.tokens, s.hidden, 3 * s.hidden
    x, g, beta = param(t, h, scale=1.0), param(h, scale=1.0), param(h, scale=0.1)
    w, b = param(n, h), param(n, scale=0.1)
    impls = {"eager": lambda: F.linear(F.layer_norm(x, (h,), g, beta, 1e-5), w, b),
             "coda": lambda: ops.layer_norm_linear(x, g, beta, w, b, 1e-5)}
    if liger:
        from liger_kernel.ops.layer_norm import LigerLayerNormFunction
        impls["liger"] = lambda: F.linear(LigerLayerNormFunction.apply(x, g, beta, 1e-5), w, b)
    return Case(impls, [x, g, beta, w, b], [(t, n, h)], linear_back(t, n, h))


def swiglu_mlp(s: Size, liger) -> Case:
    t, h, f = s.tokens, s.hidden, s.ffn
    x, w_gate, w_up, w_down = param(t, h, scale=1.0), param(f, h), param(f, h), param(h, f)
    w_gate_up = ops.interleave(w_gate.detach(), w_up.detach()).requires_grad_()

    def eager():
        return x + F.linear(F.silu(F.linear(x, w_gate)) * F.linear(x, w_up), w_down)
    impls = {"eager": eager, "coda": lambda: ops.swiglu_mlp(x, w_gate_up, w_down, residual=x)}
    if liger:
        from liger_kernel.ops.swiglu import LigerSiLUMulFunction
        impls["liger"] = lambda: x + F.linear(
            LigerSiLUMulFunction.apply(F.linear(x, w_gate), F.linear(x, w_up)), w_down)
    gemms = [(t, 2 * f, h), (t, h, f)]
    return Case(impls, [x, w_gate, w_up, w_gate_up, w_down], gemms,
                linear_back(t, 2 * f, h) + linear_back(t, h, f))


def qkv_rope(s: Size, liger) -> Case:
    t, h, d = s.tokens, s.hidden, s.hidden // s.heads
    batch, seq = t // 2048, 2048
    n = (s.heads + 2 * s.kv_heads) * d
    x, w = param(batch, seq, h, scale=1.0), param(n, h)
    inv_freq = 1.0 / 10000 ** (torch.arange(0, d, 2, device="cuda") / d)
    angles = torch.arange(seq, device="cuda")[:, None] * inv_freq
    cos, sin = angles.cos().to(BF16), angles.sin().to(BF16)          # [S, d/2], CODA's tables
    cos_full, sin_full = (torch.cat((c, c), -1) for c in (cos, sin))  # [S, d], HF's tables
    sizes = [s.heads * d, s.kv_heads * d, s.kv_heads * d]

    def eager():
        q, k, v = F.linear(x, w).split(sizes, -1)
        q, k, v = (u.unflatten(-1, (-1, d)) for u in (q, k, v))
        return (rope_rotate_half(q, cos_full[:, None], sin_full[:, None]),
                rope_rotate_half(k, cos_full[:, None], sin_full[:, None]), v)
    # CODA rotates interleaved pairs: the q and k rows permuted once (a checkpoint-load step)
    # make it compute HuggingFace's rotate_half attention exactly (docs/ops.md)
    q_rows, k_rows, v_rows = w.detach().split(sizes)
    w_coda = torch.cat((ops.permute_for_interleaved_rope(q_rows, s.heads, d),
                        ops.permute_for_interleaved_rope(k_rows, s.kv_heads, d), v_rows)).requires_grad_()
    impls = {"eager": eager,
             "coda": lambda: ops.qkv_rope(x, w_coda, cos, sin, s.heads, s.kv_heads, d)}
    if liger:
        from liger_kernel.ops.rope import LigerRopeFunction

        def liger_fn():
            q, k, v = F.linear(x, w).split(sizes, -1)
            q, k, v = (u.unflatten(-1, (-1, d)).transpose(1, 2) for u in (q, k, v))
            q, k = LigerRopeFunction.apply(q, k, cos_full[None], sin_full[None])
            return q, k, v
        impls["liger"] = liger_fn
    return Case(impls, [x, w, w_coda], [(t, n, h)], linear_back(t, n, h), compare=2)


def out_proj_residual(s: Size, liger) -> Case:
    t, h = s.tokens, s.hidden
    x, w, residual = param(t, h, scale=1.0), param(h, h), param(t, h, scale=1.0)

    def eager():
        y = residual + F.linear(x, w)
        return y, y.detach().float().square().sum(-1)
    return Case({"eager": eager, "coda": lambda: ops.out_proj_residual(x, w, residual, stats="rms")},
                [x, w, residual], [(t, h, h)], linear_back(t, h, h))


def lm_head_cross_entropy(s: Size, liger) -> Case:
    t, h, v = s.tokens, s.hidden, s.vocab
    x, w = param(t, h, scale=1.0), param(v, h)
    target = torch.randint(v, (t,), device="cuda")
    impls = {"eager": lambda: F.cross_entropy(F.linear(x, w).float(), target),
             "coda": lambda: ops.linear_cross_entropy(x, w, target)}
    if liger:
        from liger_kernel.ops.fused_linear_cross_entropy import LigerFusedLinearCrossEntropyFunction

        def liger_fn():
            out = LigerFusedLinearCrossEntropyFunction.apply(x, w, target)
            return out[0] if isinstance(out, tuple) else out
        impls["liger"] = liger_fn
    return Case(impls, [x, w], [(t, v, h)], linear_back(t, v, h))


OPS = {"linear_gelu": linear_gelu, "rms_norm_linear": rms_norm_linear,
       "layer_norm_linear": layer_norm_linear, "swiglu_mlp": swiglu_mlp, "qkv_rope": qkv_rope,
       "out_proj_residual": out_proj_residual, "lm_head_cross_entropy": lm_head_cross_entropy}


# -- measurement ---------------------------------------------------------------------------------
def bench(fn: Callable) -> float:
    """Median milliseconds."""
    return triton.testing.do_bench(fn, warmup=10, rep=60, return_mode="median")


def differentiable(out) -> list[torch.Tensor]:
    outs = out if isinstance(out, tuple) else (out,)
    return [o for o in outs if o.requires_grad]


def fwd_bwd(fn: Callable, grads_of: list[torch.Tensor]) -> Callable:
    """One forward + backward with a fixed upstream gradient per output (made on first call)."""
    upstream: list[torch.Tensor] = []

    def step():
        for p in grads_of:
            p.grad = None
        outs = differentiable(fn())
        if not upstream:
            upstream.extend(torch.randn_like(o) for o in outs)
        torch.autograd.backward(outs, upstream)
    return step


def kernel_profile(fn: Callable) -> tuple[float, int]:
    """(summed GPU kernel microseconds, kernel count) of one call, after a warm-up call."""
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
               and not e.name.startswith(("Memcpy", "Memset"))]
    return sum(e.device_time for e in kernels), len(kernels)


def graph_ms(fn: Callable) -> float | None:
    """Median milliseconds of `fn` replayed from a CUDA graph; None where it cannot be captured
    (an implementation that synchronizes with the host). Garbage is collected first: an autograd
    graph that a reference cycle keeps alive holds its leaves' AccumulateGrad nodes on the
    stream they were made on, and the capture stream's backward then synchronizes with it."""
    torch.cuda.synchronize()
    gc.collect()
    try:
        return triton.testing.do_bench_cudagraph(fn, rep=60, return_mode="median")
    except Exception as exc:
        print(f"    (no CUDA graph: {exc!r:.300})", flush=True)
        end_failed_capture()
        return None


def end_failed_capture() -> None:
    """A capture that failed leaves PyTorch's default CUDA generator in capture mode (it leaves
    it only when a capture ends well): every later random op, and torch.compile, would fail
    with "Offset increment outside graph capture". One small capture that succeeds ends it."""
    torch.cuda.synchronize()
    scratch = torch.zeros(1, device="cuda")
    with torch.cuda.graph(torch.cuda.CUDAGraph()):
        scratch.add_(1)
    torch.cuda.synchronize()


def peak_memory_gb(fn: Callable) -> float:
    """Peak allocated memory of one call above what was allocated before it."""
    fn()
    torch.cuda.synchronize()
    gc.collect()   # what earlier calls left in reference cycles would be freed mid-measurement
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 2**30


def gemm_floor(gemms: list[tuple[int, int, int]]) -> float:
    """cuBLAS milliseconds for these (M, N, K) GEMMs, bf16, each size rounded up to a multiple
    of 8: GPT-2's vocabulary of 50257 takes cuBLAS's unaligned path otherwise (unrounded, the
    eighth session measured 25.7 ms for the cross-entropy's GEMMs, more than CODA's whole op,
    8.35 ms, whose logit blocks are padded): a cost no implementation has to pay."""
    total = 0.0
    for m, n, k in ([-(-d // 8) * 8 for d in gemm] for gemm in gemms):
        a, b = torch.randn(m, k, device="cuda", dtype=BF16), torch.randn(n, k, device="cuda", dtype=BF16)
        total += bench(lambda a=a, b=b: a @ b.T)
    return total


def check_close(name: str, got, want, index: int) -> float:
    """Relative error of one CODA output against eager's (a sanity check, not the test)."""
    got = (got if isinstance(got, tuple) else (got,))[index].float()
    want = (want if isinstance(want, tuple) else (want,))[index].float()
    err = ((got - want).norm() / want.norm()).item()
    if not err < 3e-2:
        raise AssertionError(f"{name}: CODA differs from eager by {err:.2e}")
    return err


def prepare(op: str, size: str, liger: bool, compile_modes: list[str]) -> tuple[Case, dict, float]:
    """The case, its implementations (compiled ones included) and CODA's error against eager,
    with every pass run once: compilation happens here, before the child's turn."""
    torch.manual_seed(0)
    case = OPS[op](SIZES[size], liger)
    impls = dict(case.impls)
    for mode in compile_modes:
        compiled = torch.compile(case.impls["eager"], mode=None if mode == "default" else mode)
        impls["compile" if mode == "default" else "max_autotune"] = compiled
    err = check_close(f"{op} {size}", impls["coda"](), impls["eager"](), case.compare)
    for impl, fn in impls.items():
        try:
            fn() if impl in case.no_backward else fwd_bwd(fn, case.grads_of)()
        except Exception:   # measure() records it
            pass
    torch.cuda.synchronize()
    return case, impls, err


def measure(op: str, size: str, case: Case, impls: dict, err: float) -> list[dict]:
    """The rows of one case: each implementation's fwd and fwd+bwd timed, every fwd+bwd also
    replayed from a CUDA graph (not Liger's), and for eager, CODA and Liger its kernel profile
    and peak memory."""
    floor = {"fwd": gemm_floor(case.gemms_fwd), "fwd_bwd": gemm_floor(case.gemms_fwd + case.gemms_bwd)}
    rows = []
    for impl, fn in impls.items():
        passes = {"fwd": fn}
        if impl not in case.no_backward:
            passes["fwd_bwd"] = fwd_bwd(fn, case.grads_of)
        for name, step in passes.items():
            try:
                ms = bench(step)
            except Exception as exc:   # a peer that cannot run this case: record it, go on
                rows.append(dict(op=op, size=size, impl=impl, pass_=name, error=repr(exc)[:300]))
                continue
            row = dict(op=op, size=size, impl=impl, pass_=name, ms=ms, gemm_floor_ms=floor[name],
                       over_floor=ms / floor[name])
            if name == "fwd_bwd" and impl in ("eager", "coda", "liger"):
                row["kernel_us"], row["kernels"] = kernel_profile(step)
                row["peak_mem_gb"] = peak_memory_gb(step)
            # Liger synchronizes with the host inside its ops: not capturable, and a failed
            # capture leaves the CUDA RNG unusable for the cases after it
            if name == "fwd_bwd":
                row["graph_ms"] = graph_ms(step) if impl != "liger" else None
            if impl == "coda":
                row["rel_err_vs_eager"] = err
            rows.append(row)
    return rows


def row_line(row: dict) -> str:
    """One row as a line of output."""
    head = f"{row['op']:22s} {row['size']:8s} "
    if "pass_" not in row:
        return head + f"FAILED {row['error']:.300}"
    head += f"{row['impl']:13s} {row['pass_']:8s} "
    if "error" in row:
        return head + f"ERROR {row['error']:.120}"
    graph = f", graph {row['graph_ms'] * 1e3:8.1f}us" if row.get("graph_ms") else ""
    extra = (f"  gpu {row['kernel_us']:8.1f}us in {row['kernels']:3d} kernels{graph}, "
             f"peak {row['peak_mem_gb']:.2f} GB" if "kernels" in row else "")
    return head + f"{row['ms'] * 1e3:9.1f}us  {row['over_floor']:5.2f}x gemm floor{extra}"


def child(args: argparse.Namespace) -> None:
    """One case (--child op:size): warm up, wait for the turn, measure, report the rows."""
    op, size = args.child.split(":")
    try:
        prepared = prepare(op, size, not args.no_liger, compile_modes(size, args))
        side_by_side.wait_turn()
        rows = measure(op, size, *prepared)
    except Exception as exc:   # the parent records it and goes on with the other cases
        traceback.print_exc()
        rows = [dict(op=op, size=size, error=repr(exc)[:500])]
    side_by_side.report(rows)


def compile_modes(size: str, args: argparse.Namespace) -> list[str]:
    if args.no_compile:
        return []
    return ["default"] + ["max-autotune-no-cudagraphs"] * (size in args.max_autotune.split(","))


def summarize_replayed(rows: list[dict]) -> list[dict]:
    """Per (op, size): CODA's fwd+bwd replayed from a CUDA graph against each peer's, the host's
    launch cost taken out of both sides (what a step captured in a graph sees). A peer that
    cannot be captured (Liger synchronizes with the host) counts with its kernels' summed GPU
    time, a lower bound on any replay of it (no gaps between kernels): in its favour."""
    out = []
    for op, size in sorted({(r["op"], r["size"]) for r in rows if r.get("pass_") == "fwd_bwd"}):
        cases = [r for r in rows if (r["op"], r["size"], r.get("pass_")) == (op, size, "fwd_bwd")]
        times = {r["impl"]: replay_ms(r) for r in cases if replay_ms(r)}
        if "coda" not in times or times["coda"][1] != "graph" or len(times) < 2:
            continue
        peers = {k: v for k, v in times.items() if k != "coda"}
        best = min(peers, key=lambda k: peers[k][0])
        coda_ms, (best_ms, kind) = times["coda"][0], peers[best]
        out.append(dict(op=op, size=size, coda_graph_ms=coda_ms, best_peer=best, best_peer_ms=best_ms,
                        best_peer_timed=kind, speedup_vs_best=best_ms / coda_ms))
    return out


def summarize(rows: list[dict]) -> list[dict]:
    """Per (op, size, pass): CODA's speed-up over the best peer and over eager."""
    out = []
    keys = sorted({(r["op"], r["size"], r["pass_"]) for r in rows if "pass_" in r})
    for op, size, pass_ in keys:
        times = {r["impl"]: r["ms"] for r in rows
                 if (r["op"], r["size"], r["pass_"]) == (op, size, pass_) and "ms" in r}
        if "coda" not in times:
            continue
        peers = {k: v for k, v in times.items() if k != "coda"}
        best = min(peers, key=peers.get)
        out.append(dict(op=op, size=size, pass_=pass_, coda_ms=times["coda"], best_peer=best,
                        best_peer_ms=peers[best], speedup_vs_best=peers[best] / times["coda"],
                        speedup_vs_eager=times["eager"] / times["coda"]))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(SIZES))
    parser.add_argument("--ops", default=",".join(OPS))
    parser.add_argument("--max-autotune", default="gpt2",
                        help="sizes at which to also time mode=max-autotune-no-cudagraphs ('' for none)")
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--no-liger", action="store_true")
    parser.add_argument("--together", type=int, default=21,
                        help="cases that warm up side by side, each in its own process (1 when "
                             "CODA or Inductor autotunes: CODA_AUTOTUNE on, --max-autotune sizes)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per case's process")
    parser.add_argument("--json", default="benchmarks/results/micro.json")
    parser.add_argument("--child", help=argparse.SUPPRESS)   # "op:size": run it, report its rows
    args = parser.parse_args()
    if args.child:
        return child(args)
    side_by_side.require_gpu(f"benchmarks/{Path(__file__).name}")
    if not args.no_liger:
        try:
            import liger_kernel  # noqa: F401
        except ImportError:
            print("liger-kernel is not installed: Liger is left out", flush=True)
            args.no_liger = True
    options = ["--max-autotune", args.max_autotune] + ["--no-compile"] * args.no_compile
    options += ["--no-liger"] * args.no_liger
    cases = [f"{op}:{size}" for size in args.sizes.split(",") for op in args.ops.split(",")]
    rows = []
    # max-autotune times Inductor's kernels while it compiles: alone, like CODA's autotuning
    tuned = set(args.max_autotune.split(",")) & set(args.sizes.split(","))
    together = 1 if tuned and not args.no_compile else args.together
    commands = [[sys.executable, __file__, "--child", case, *options] for case in cases]
    for case, turn in zip(cases, side_by_side.turns(commands, together, args.timeout), strict=True):
        op, size = case.split(":")
        got = turn.result or [dict(op=op, size=size, error=turn.error)]
        if turn.result is None or "pass_" not in got[0]:
            print(turn.log, file=sys.stderr, flush=True)
        for row in got:
            print(row_line(row), flush=True)
        rows += got
        # a run cut short keeps what it measured
        write(args.json, rows, summarize(rows), summarize_replayed(rows))
    summary = summarize(rows)
    print("\nop                     size     pass      CODA us  best peer          speed-up  vs eager")
    for s in summary:
        print(f"{s['op']:22s} {s['size']:8s} {s['pass_']:8s} {s['coda_ms'] * 1e3:8.1f}  "
              f"{s['best_peer']:13s} {s['best_peer_ms'] * 1e3:8.1f}  {s['speedup_vs_best']:5.2f}x  "
              f"{s['speedup_vs_eager']:5.2f}x")
    print(f"geomean speed-up of CODA over the best peer: {geomean(summary):.3f}x")
    replayed = summarize_replayed(rows)
    print("\nfwd+bwd replayed from CUDA graphs (a peer that cannot be captured: its kernels' time)")
    for s in replayed:
        print(f"{s['op']:22s} {s['size']:8s} {s['coda_graph_ms'] * 1e3:8.1f}  {s['best_peer']:13s} "
              f"{s['best_peer_ms'] * 1e3:8.1f} ({s['best_peer_timed']})  {s['speedup_vs_best']:5.2f}x")
    print(f"geomean speed-up of CODA over the best peer, replayed: {geomean(replayed):.3f}x")
    write(args.json, rows, summary, replayed)
    print(f"wrote {args.json}")


def geomean(summary: list[dict]) -> float:
    """Geometric mean of the summary's speed-ups over the best peer (1.0 for none)."""
    return math.exp(sum(math.log(s["speedup_vs_best"]) for s in summary) / max(1, len(summary)))


def write(path: str, rows: list[dict], summary: list[dict], replayed: list[dict]) -> None:
    result = dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
                  python=platform.python_version(),
                  date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                  command="python " + " ".join(sys.argv), sizes={k: vars(v) for k, v in SIZES.items()},
                  results=rows, summary=summary, geomean_speedup_vs_best=geomean(summary),
                  summary_replayed=replayed, geomean_speedup_vs_best_replayed=geomean(replayed))
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
