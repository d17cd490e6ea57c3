"""Draft: Hopper (sm_90) ping-pong GEMM + bias + GELU in Gluon, so one tile's epilogue overlaps the next MMA.

    python benchmarks/experiments/gluon_pingpong.py [--json benchmarks/results/gluon_pingpong.json]

Computes ``out = gelu_tanh(A @ W.T + bias)`` (or ``A @ W.T`` with ``EPILOGUE=False``): A [M, K] and
W [N, K] row-major bf16 (W is an nn.Linear weight), fp32 accumulation, bf16 out.

Why: /work/shared/MEASURED.md ("The epilogue is where the fight is") measured that in CODA's
persistent-TMA Triton kernel the epilogue runs after each tile's K loop with nothing overlapping it
(bias + GELU costs 1.18x of cuBLAS plain at 16384x3072x768). CUTLASS/QuACK hide it with a
warp-specialized "ping-pong" mainloop; this file is the first Gluon draft of that.

Pipeline (one persistent CTA per SM, three partitions, `gl.warp_specialize`)
---------------------------------------------------------------------------
The program's tiles are ``tile = pid + i * num_programs`` for ``i = 0, 1, 2, ...`` (grouped by
``GROUP_M`` along M for L2 reuse). Tile ``i`` goes to consumer warpgroup ``i % 2``.

* producer (worker, 1 warp, few registers): for every tile ``i`` of the program and every K step,
  takes the next slot ``s`` of a ``STAGES``-deep shared-memory ring of (A, W) tiles:
  waits ``empty[s]`` (the consumer released the slot), ``expect``s the byte count on ``ready[s]``
  and issues two TMA loads that complete ``ready[s]``. It never waits on anything else, so it runs
  up to ``STAGES`` K steps ahead, across tile boundaries (it prefetches tile ``i+1`` while tile
  ``i``'s K loop still runs).
* consumer ``WG`` in {0, 1} (default partition = WG 0, 4 warps; worker = WG 1, 4 warps): for its
  tiles ``i = WG, WG + 2, ...``:
    1. waits ``turn[WG]`` -- the MMA "baton": only one warpgroup runs its K loop at a time, in tile
       order (consumer 0 holds it first). This is what makes it ping-pong rather than two
       independent consumers fighting for the tensor cores.
    2. K loop over the ring slots that belong to tile ``i`` (ring position ``i * k_steps + kk``,
       because the producer fills the ring in tile order): waits ``ready[s]``, issues an async
       ``warpgroup_mma`` (wgmma), waits until at most one wgmma is in flight, then arrives on
       ``empty[s_prev]`` to hand the previous slot back to the producer.
    3. arrives on ``turn[1 - WG]``: the other warpgroup starts its K loop now, while this one
       drains its last wgmma and runs the epilogue.
    4. epilogue, in sub-tiles of ``BLOCK_M x EPI_N``: bias + GELU(tanh, ``tanh.approx.f32``) in
       registers, cast to bf16, store into one of this warpgroup's ``EPI_BUFS`` shared-memory
       buffers (after ``tma.store_wait(EPI_BUFS - 1)`` proved that buffer's previous TMA store
       finished reading it), ``fence_async_shared``, async TMA store. Stores are never waited for
       in the tile loop, only before a buffer is reused and once at the end.

Barriers (all count 1; "phase" = parity of the completion being waited for):
    ready[s]  completed by the TMA engine (expect-tx bytes) -- waited by the consumer that owns the slot
    empty[s]  arrived by the consumer after its wgmma reading slot s retired -- waited by the producer
              (starting at parity 1, which a fresh barrier satisfies: the ring starts empty)
    turn[w]   arrived by consumer 1-w after issuing its tile's last wgmma -- waited by consumer w
              (consumer 0 starts at parity 1 so it goes first; consumer 1 at parity 0)

Shared memory at the default sizes: STAGES * (128x64 + 128x64) bf16 = 4 * 32 KiB = 128 KiB ring,
2 warpgroups * EPI_BUFS * 128x64 bf16 = 64 KiB epilogue staging, i.e. 192 KiB of 227 KiB.
Registers: 3 warpgroups (the 1-warp producer is padded to one) at ``maxnreg=168`` = 64512 of 65536;
the worker consumer asks for 232, the producer 40, the default consumer gets the remainder (232).

Not done yet (next drafts): bias / residual tiles prefetched by the producer with TMA into shared
memory (bias is read with a plain `gl.load`, it is BLOCK_N elements and sits in L2); masked tails
(TMA zero-fills loads and clips stores, so M, N, K need only meet TMA's 16-byte stride alignment).
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
from pathlib import Path

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

# Block sizes (per consumer warpgroup tile) and pipeline depths.
BLOCK_M = 128  # rows of a tile: 2 x m64 wgmma per warpgroup
BLOCK_N = 128  # columns of a tile: one n128 wgmma; 128 fp32 accumulator registers per thread
BLOCK_K = 64  # K step: 64 bf16 = 128 B rows, the full 128 B TMA swizzle
EPI_N = 64  # epilogue sub-tile width (columns per TMA store)
STAGES = 4  # depth of the (A, W) shared-memory ring
EPI_BUFS = 2  # epilogue staging buffers per consumer warpgroup
GROUP_M = 8  # tiles grouped along M for L2 reuse of W
CONSUMER_WARPS = 4  # one warpgroup per consumer
PRODUCER_WARPS = 1
CONSUMER_REGS = 232
PRODUCER_REGS = 40
MAXNREG = 168  # (232 + 232 + 40) / 3 warpgroups

GELU_C = gl.constexpr(0.7978845608028654)  # sqrt(2 / pi)


# ----------------------------------------------------------------------------------------------------
# Device helpers
# ----------------------------------------------------------------------------------------------------
@gluon.jit
def _tile_offsets(tile, M, N, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, GROUP_M: gl.constexpr):
    """Grouped (L2-friendly) tile id -> (row offset, column offset)."""
    num_pid_m = gl.cdiv(M, BLOCK_M)
    num_pid_n = gl.cdiv(N, BLOCK_N)
    tiles_per_group = GROUP_M * num_pid_n
    first_m = (tile // tiles_per_group) * GROUP_M
    group_m = gl.minimum(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (tile % group_m)
    pid_n = (tile % tiles_per_group) // group_m
    return pid_m * BLOCK_M, pid_n * BLOCK_N


@gluon.jit
def _tanh_approx(x):
    return gl.inline_asm_elementwise("tanh.approx.f32 $0, $1;", "=f,f", [x], dtype=gl.float32,
                                     is_pure=True, pack=1)


@gluon.jit
def _gelu_tanh(x):
    inner = GELU_C * (x + 0.044715 * x * x * x)
    return 0.5 * x * (1.0 + _tanh_approx(inner))


@gluon.jit
def _split_n(x, SPLIT: gl.constexpr):
    """Split a [BLOCK_M, BLOCK_N] register tile into SPLIT column blocks (no data movement in the
    wgmma layout: the top column bit is a register bit)."""
    xs = (x,)
    for _ in gl.static_range(SPLIT.bit_length() - 1):
        nxt = ()
        for j in gl.static_range(len(xs)):
            y = xs[j]
            nxt += y.reshape([y.shape[0], 2, y.shape[1] // 2]).permute(0, 2, 1).split()
        xs = nxt
    return xs


# ----------------------------------------------------------------------------------------------------
# Partitions
# ----------------------------------------------------------------------------------------------------
@gluon.jit
def _producer(a_desc, w_desc, a_ring, w_ring, ready, empty, M, N, K,
              BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr,
              STAGES: gl.constexpr, GROUP_M: gl.constexpr):
    num_tiles = gl.cdiv(M, BLOCK_M) * gl.cdiv(N, BLOCK_N)
    k_steps = gl.cdiv(K, BLOCK_K)
    nbytes: gl.constexpr = a_desc.block_type.nbytes + w_desc.block_type.nbytes
    it = 0  # ring position, continuous across tiles (the consumers compute the same numbering)
    for tile in range(gl.program_id(0), num_tiles, gl.num_programs(0)):
        off_m, off_n = _tile_offsets(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        for kk in range(k_steps):
            s = it % STAGES
            mbarrier.wait(empty.index(s), ((it // STAGES) & 1) ^ 1)
            mbarrier.expect(ready.index(s), nbytes)
            tma.async_copy_global_to_shared(a_desc, [off_m, kk * BLOCK_K], ready.index(s), a_ring.index(s))
            tma.async_copy_global_to_shared(w_desc, [off_n, kk * BLOCK_K], ready.index(s), w_ring.index(s))
            it += 1


@gluon.jit
def _consumer(c_desc, a_ring, w_ring, c_bufs, ready, empty, turn, bias_ptr, M, N, K,
              WG: gl.constexpr, EPILOGUE: gl.constexpr,
              BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, EPI_N: gl.constexpr,
              STAGES: gl.constexpr, EPI_BUFS: gl.constexpr, GROUP_M: gl.constexpr):
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                         instr_shape=[16, BLOCK_N, 16])
    num_tiles = gl.cdiv(M, BLOCK_M) * gl.cdiv(N, BLOCK_N)
    k_steps = gl.cdiv(K, BLOCK_K)
    nprog = gl.num_programs(0)

    i = 0  # this warpgroup's tile count; its tiles are the program's tiles 2 * i + WG
    for tile in range(gl.program_id(0) + WG * nprog, num_tiles, 2 * nprog):
        off_m, off_n = _tile_offsets(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        it = (2 * i + WG) * k_steps  # first ring position of this tile

        # 1. take the MMA baton (consumer 0 first: parity 1 of a fresh barrier passes at once)
        mbarrier.wait(turn.index(WG), (i & 1) ^ (1 - WG))

        # 2. K loop: async wgmma, keep one in flight, release the slot of the previous step
        acc = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, acc_layout)
        for kk in range(k_steps):
            s = it % STAGES
            mbarrier.wait(ready.index(s), (it // STAGES) & 1)
            a_s = a_ring.index(s)
            w_s = w_ring.index(s)
            acc = warpgroup_mma(a_s, w_s.permute((1, 0)), acc, is_async=True)
            acc, _, _ = warpgroup_mma_wait(num_outstanding=1, deps=(acc, a_s, w_s))
            mbarrier.arrive(empty.index((it + STAGES - 1) % STAGES), count=1, pred=kk > 0)
            it += 1

        # 3. hand the baton over, then drain our last wgmma and release its slot
        mbarrier.arrive(turn.index(1 - WG), count=1)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        mbarrier.arrive(empty.index((it + STAGES - 1) % STAGES), count=1)

        # 4. epilogue in BLOCK_M x EPI_N sub-tiles, staged through smem, async TMA stores
        subs = _split_n(acc, BLOCK_N // EPI_N)
        for j in gl.static_range(BLOCK_N // EPI_N):
            x = subs[j]
            if EPILOGUE:
                cols = off_n + j * EPI_N + gl.arange(0, EPI_N, layout=gl.SliceLayout(0, x.type.layout))
                bias = gl.load(bias_ptr + cols, mask=cols < N, other=0.0).to(gl.float32)
                x = _gelu_tanh(x + gl.expand_dims(bias, 0))
            buf = c_bufs.index(WG * EPI_BUFS + j % EPI_BUFS)  # this warpgroup's buffers
            tma.store_wait(EPI_BUFS - 1)  # the store that last read `buf` is done
            buf.store(x.to(c_desc.dtype))
            fence_async_shared()
            tma.async_copy_shared_to_global(c_desc, [off_m, off_n + j * EPI_N], buf)
        i += 1
    tma.store_wait(0)


@gluon.jit
def pingpong_gemm_kernel(a_desc, w_desc, c_desc, bias_ptr, M, N, K,
                         EPILOGUE: gl.constexpr,
                         BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr,
                         EPI_N: gl.constexpr, STAGES: gl.constexpr, EPI_BUFS: gl.constexpr,
                         GROUP_M: gl.constexpr, CONSUMER_REGS: gl.constexpr, PRODUCER_REGS: gl.constexpr):
    a_ring = gl.allocate_shared_memory(a_desc.dtype, [STAGES, BLOCK_M, BLOCK_K], a_desc.layout)
    w_ring = gl.allocate_shared_memory(w_desc.dtype, [STAGES, BLOCK_N, BLOCK_K], w_desc.layout)
    c_bufs = gl.allocate_shared_memory(c_desc.dtype, [2 * EPI_BUFS, BLOCK_M, EPI_N], c_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    turn = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(ready.index(s), count=1)
        mbarrier.init(empty.index(s), count=1)
    for w in gl.static_range(2):
        mbarrier.init(turn.index(w), count=1)
    fence_async_shared()

    gl.warp_specialize([
        # default partition (num_warps = 4): consumer warpgroup 0
        (_consumer, (c_desc, a_ring, w_ring, c_bufs, ready, empty, turn, bias_ptr, M, N, K, 0, EPILOGUE,
                     BLOCK_M, BLOCK_N, BLOCK_K, EPI_N, STAGES, EPI_BUFS, GROUP_M)),
        # worker 0 (4 warps): consumer warpgroup 1
        (_consumer, (c_desc, a_ring, w_ring, c_bufs, ready, empty, turn, bias_ptr, M, N, K, 1, EPILOGUE,
                     BLOCK_M, BLOCK_N, BLOCK_K, EPI_N, STAGES, EPI_BUFS, GROUP_M)),
        # worker 1 (1 warp): TMA producer
        (_producer, (a_desc, w_desc, a_ring, w_ring, ready, empty, M, N, K,
                     BLOCK_M, BLOCK_N, BLOCK_K, STAGES, GROUP_M)),
    ], [4, 1], [CONSUMER_REGS, PRODUCER_REGS])

    for s in gl.static_range(STAGES):
        mbarrier.invalidate(ready.index(s))
        mbarrier.invalidate(empty.index(s))
    for w in gl.static_range(2):
        mbarrier.invalidate(turn.index(w))


# ----------------------------------------------------------------------------------------------------
# Host side
# ----------------------------------------------------------------------------------------------------
def _layouts():
    return (gl.NVMMASharedLayout.get_default_for([BLOCK_M, BLOCK_K], gl.bfloat16),
            gl.NVMMASharedLayout.get_default_for([BLOCK_N, BLOCK_K], gl.bfloat16),
            gl.NVMMASharedLayout.get_default_for([BLOCK_M, EPI_N], gl.bfloat16))


def constexprs(epilogue: bool = True) -> dict:
    return dict(EPILOGUE=epilogue, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, EPI_N=EPI_N,
                STAGES=STAGES, EPI_BUFS=EPI_BUFS, GROUP_M=GROUP_M, CONSUMER_REGS=CONSUMER_REGS,
                PRODUCER_REGS=PRODUCER_REGS)


def descriptors(a: torch.Tensor, w: torch.Tensor, out: torch.Tensor):
    la, lw, lc = _layouts()
    return (TensorDescriptor.from_tensor(a, [BLOCK_M, BLOCK_K], la),
            TensorDescriptor.from_tensor(w, [BLOCK_N, BLOCK_K], lw),
            TensorDescriptor.from_tensor(out, [BLOCK_M, EPI_N], lc))


def compile_for_sm90(epilogue: bool = True):
    """Compile without a GPU (explicit target); returns the CompiledKernel (``.asm['ptx']`` etc.)."""
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    from triton.runtime.jit import mangle_type

    m, n, k = 256, 256, 128  # shapes are runtime values; only dtype / block / layout enter the signature
    a = torch.empty(m, k, dtype=torch.bfloat16)
    w = torch.empty(n, k, dtype=torch.bfloat16)
    out = torch.empty(m, n, dtype=torch.bfloat16)
    da, dw, dc = descriptors(a, w, out)
    signature = {"a_desc": mangle_type(da), "w_desc": mangle_type(dw), "c_desc": mangle_type(dc),
                 "bias_ptr": "*bf16", "M": "i32", "N": "i32", "K": "i32"}
    cx = constexprs(epilogue)
    signature.update({name: "constexpr" for name in cx})
    src = GluonASTSource(fn=pingpong_gemm_kernel, signature=signature, constexprs=cx)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32),
                          options=dict(num_warps=CONSUMER_WARPS, maxnreg=MAXNREG))


def linear_bias_gelu(a: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None,
                     out: torch.Tensor | None = None, num_programs: int | None = None) -> torch.Tensor:
    """``gelu_tanh(a @ w.T + bias)`` (plain ``a @ w.T`` when ``bias is None``) with the ping-pong kernel."""
    m, k = a.shape
    n = w.shape[0]
    assert a.dtype == w.dtype == torch.bfloat16 and w.shape[1] == k
    if out is None:
        out = torch.empty(m, n, device=a.device, dtype=torch.bfloat16)
    num_tiles = triton.cdiv(m, BLOCK_M) * triton.cdiv(n, BLOCK_N)
    if num_programs is None:
        num_programs = torch.cuda.get_device_properties(a.device).multi_processor_count
    grid = (min(num_programs, num_tiles),)
    da, dw, dc = descriptors(a, w, out)
    pingpong_gemm_kernel[grid](da, dw, dc, bias if bias is not None else out, m, n, k,
                               num_warps=CONSUMER_WARPS, maxnreg=MAXNREG, **constexprs(bias is not None))
    return out


# ----------------------------------------------------------------------------------------------------
# GPU check + benchmark
# ----------------------------------------------------------------------------------------------------
SHAPES = [(16384, 3072, 768), (8192, 11008, 4096)]


def _bench(fn) -> float:
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def main() -> None:
    import torch.nn.functional as F
    import triton.testing

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default=",".join("x".join(map(str, s)) for s in SHAPES))
    parser.add_argument("--json", default="benchmarks/results/gluon_pingpong.json")
    parser.add_argument("--no-coda", action="store_true", help="skip CODA's current path")
    args = parser.parse_args()
    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")]
    assert torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9, "needs an sm_90 GPU"

    prog = None
    if not args.no_coda:
        sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
        import coda
        prog = coda.compile("EPILOGUE(bias: col) { output = gelu(input + bias); }")

    rows = []
    for m, n, k in shapes:
        torch.manual_seed(0)
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k**0.5
        bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)

        # correctness: error vs float64 must be <= 2x eager bf16's (plus a tiny floor)
        ref_plain = a.double() @ w.double().T
        ref = F.gelu(ref_plain + bias.double(), approximate="tanh")
        eager = F.gelu(a @ w.T + bias, approximate="tanh")
        checks = {"plain": (linear_bias_gelu(a, w, None), a @ w.T, ref_plain),
                  "bias_gelu": (linear_bias_gelu(a, w, bias), eager, ref)}
        if prog is not None:
            checks["coda_bias_gelu"] = (prog(a, w.T, bias=bias)["output"], eager, ref)
        ok = {}
        for name, (got, base, r) in checks.items():
            err = (got.double() - r).abs().max().item()
            err_eager = (base.double() - r).abs().max().item()
            ok[name] = dict(max_err=err, eager_max_err=err_eager, ok=err <= 2 * err_eager + 1e-6)
            print(f"{m}x{n}x{k} {name:15s} max|err| {err:.3e}  eager {err_eager:.3e}  "
                  f"{'OK' if ok[name]['ok'] else 'FAIL'}", flush=True)

        timings = {"cublas_plain": _bench(lambda: a @ w.T),
                   "eager_bias_gelu": _bench(lambda: F.gelu(a @ w.T + bias, approximate="tanh")),
                   "cublaslt_bias_gelu": _bench(lambda: torch._addmm_activation(bias, a, w.T, use_gelu=True))}
        out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        timings["gluon_plain"] = _bench(lambda: linear_bias_gelu(a, w, None, out))
        timings["gluon_bias_gelu"] = _bench(lambda: linear_bias_gelu(a, w, bias, out))
        if prog is not None:
            timings["coda_bias_gelu"] = _bench(lambda: prog(a, w.T, bias=bias))
        base = timings["cublas_plain"]
        flops = 2 * m * n * k
        for impl, ms in timings.items():
            rows.append(dict(shape=[m, n, k], impl=impl, ms=ms, tflops=flops / ms / 1e9,
                             over_cublas=ms / base, over_gluon_plain=ms / timings["gluon_plain"]))
        rows.append(dict(shape=[m, n, k], impl="correctness", checks=ok))
        print(f"\n{m}x{n}x{k}")
        print(f"  {'impl':20s} {'us':>9s} {'TFLOP/s':>8s} {'/cublas':>8s} {'/gluon_plain':>12s}")
        for impl, ms in timings.items():
            print(f"  {impl:20s} {ms * 1e3:9.1f} {flops / ms / 1e9:8.1f} {ms / base:8.3f} "
                  f"{ms / timings['gluon_plain']:12.3f}", flush=True)

    result = dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
                  python=platform.python_version(),
                  date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                  config=dict(constexprs(), MAXNREG=MAXNREG), command="python " + " ".join(sys.argv),
                  results=rows)
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(result, indent=1))
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
