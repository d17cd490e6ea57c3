"""Session 55 probe: a memory-bound map run by spare warps of a ping-pong GEMM kernel.

LLaMA's MLP backward runs the SwiGLU gradient fused in dh's GEMM (dh = dy @ w_down, its
epilogue reading g and u and writing dpre = pack(dg, du)): 1.55x that GEMM's plain time, because
the epilogue's memory traffic is not overlapped with MMAs. The weight gradient dW_down =
dy.T @ h that follows needs neither dh nor dpre. So: dh from a plain GEMM, and the SwiGLU
gradient as a map over dh run by a fourth warp partition *inside* dW_down's ping-pong kernel,
whose tensor-core-bound MMA warpgroups leave the SM's memory bandwidth and most issue slots
free. This probe takes CODA's generated ping-pong kernel for the plain dW_down GEMM, adds the
map as a partition of 4 warps (hand-written here), and times, from CUDA graphs:
the current pair (fused gradient GEMM + cuBLAS dW_down) against the new one (plain dh GEMM +
dW_down with the map beside it), and each piece alone.

    python benchmarks/results/session55/side_map_probe.py            # on a GPU: $OUT/side_map.json
    # on the CPU, the sm_90 build and ptxas's registers and spills of each variant:
    TRITON_INTERPRET=0 python benchmarks/results/session55/side_map_probe.py --compile-only
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests" / "codegen"))

import torch  # noqa: E402
from test_hopper_compiles import Recorder  # noqa: E402  (stands in for the kernel: records its arguments)

from coda.codegen import kernel as km  # noqa: E402
from coda.ops.common import PLAIN  # noqa: E402
from coda.ops.gated_mlp import grad_program  # noqa: E402

SIDE_MAP = '''
@gluon.jit
def side_tile(DH, G, U, t, tiles, col_tiles, SM, SF, stride_m, rows0, cols0, BR: gl.constexpr,
              BC: gl.constexpr):
    # map tile t's raw dh, g and u (nothing past the last tile)
    rows = (t // col_tiles) * BR + rows0
    cols = (t % col_tiles) * BC + cols0
    mask = (rows < SM)[:, None] & (cols < SF)[None, :] & (t < tiles)
    offs = rows[:, None] * stride_m + cols[None, :]
    return (gl.load(DH + offs, mask=mask, other=0.0), gl.load(G + offs, mask=mask, other=0.0),
            gl.load(U + offs, mask=mask, other=0.0))


@gluon.jit
def side_map(DH, G, U, OUT, SM, SF, stride_m, out_stride_m, BR: gl.constexpr, BC: gl.constexpr):
    # 4 warps; program p takes map tiles p, p + programs, ... of the [SM, SF] domain: each a
    # [BR, BC] block of dh, g and u in, a [BR, 2 BC] block of the packed gradient out. The next
    # tiles' loads are issued before this one's math (DEPTH + 1 tiles in flight a thread).
    layout: gl.constexpr = gl.BlockedLayout([1, 8], [2, 16], [4, 1], [1, 0])
    rows0 = gl.arange(0, BR, layout=gl.SliceLayout(1, layout))
    cols0 = gl.arange(0, BC, layout=gl.SliceLayout(0, layout))
    col_tiles = gl.cdiv(SF, BC)
    tiles = gl.cdiv(SM, BR) * col_tiles
    programs = gl.num_programs(0)
    # DEPTH tiles in flight: tile t + i * programs held in (dh_i, g_i, u_i), i < DEPTH
PRELOADS
    for t in range(gl.program_id(0), tiles, programs):
        ndh, ng, nu = side_tile(DH, G, U, t + DEPTH * programs, tiles, col_tiles, SM, SF, stride_m, rows0,
                                cols0, BR, BC)
        dh, g, u = dh_0, g_0, u_0
        rows = (t // col_tiles) * BR + rows0
        cols = (t % col_tiles) * BC + cols0
        mask = (rows < SM)[:, None] & (cols < SF)[None, :]
        dh32 = dh.to(gl.float32)
        g32 = g.to(gl.float32)
        dg = dh32 * u.to(gl.float32) * cm.silu_grad(g32)
        du = dh32 * cm.silu(g32)
        out = rows[:, None] * out_stride_m + 2 * cols[None, :]
        packed = gl.reshape(gl.join(dg, du), [BR, 2 * BC])
        where = gl.reshape(gl.join(out, out + 1), [BR, 2 * BC])
        both = gl.reshape(gl.join(mask, mask), [BR, 2 * BC])
        gl.store(OUT + where, packed.to(OUT.dtype.element_ty), mask=both)
ROTATE

'''


#: rows of a map tile (of 128 columns): 4 warps hold SIDE_ROWS * 128 / 128 elements a thread
SIDE_ROWS = int(os.environ.get("SIDE_ROWS", "8"))


#: map tiles in flight a thread (loaded ahead of the one computed)
SIDE_DEPTH = int(os.environ.get("SIDE_DEPTH", "2"))


def side_map_source(depth: int) -> str:
    """SIDE_MAP with its register pipeline `depth` tiles deep."""
    preloads = "\n".join(f"    dh_{i}, g_{i}, u_{i} = side_tile(DH, G, U, gl.program_id(0) + {i} * programs, "
                          "tiles, col_tiles, SM, SF, stride_m, rows0, cols0, BR, BC)" for i in range(depth))
    rotate = "\n".join(f"        dh_{i}, g_{i}, u_{i} = dh_{i + 1}, g_{i + 1}, u_{i + 1}"
                       for i in range(depth - 1))
    rotate += f"\n        dh_{depth - 1}, g_{depth - 1}, u_{depth - 1} = ndh, ng, nu"
    return (SIDE_MAP.replace("PRELOADS", preloads).replace("ROTATE", rotate)
            .replace("DEPTH * programs", f"{depth} * programs"))


def side_source(source: str, map_regs: int) -> str:
    """CODA's ping-pong kernel source with the map partition added (after the loader)."""
    kernel = source.index("@gluon.jit(do_not_specialize")
    source = source[:kernel] + side_map_source(SIDE_DEPTH) + source[kernel:]
    params = "out_output_s0, out_output_s1,\n              BLOCK_M: gl.constexpr"
    assert source.count(params) == 1
    source = source.replace(params, "out_output_s0, out_output_s1,\n              SDH, SG, SU, SOUT, "
                            "SM, SF, S_STRIDE, S_OUT_STRIDE,\n              BLOCK_M: gl.constexpr")
    tail = "    ], [4, 1], [MMA_REGS, LOAD_REGS])"
    loader = "        (load_partition, ("
    assert source.count(tail) == 1 and source.count(loader) == 1
    # the map's 4 warps right after the MMA warpgroups: a warpgroup of their own (setmaxnreg
    # acts on whole warpgroups), the 1-warp loader last
    source = source.replace(loader, "        (side_map, (SDH, SG, SU, SOUT, SM, SF, S_STRIDE, S_OUT_STRIDE, "
                            f"{SIDE_ROWS}, 128)),\n" + loader)
    return source.replace(tail, f"    ], [4, 4, 1], [MMA_REGS, {map_regs}, LOAD_REGS])")


def load_module(source: str, tag: str):
    path = Path(tempfile.mkdtemp()) / f"side_{tag}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(f"side_{tag}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def dw_launch(dy, h, config, map_regs, regs):
    """(fn, grid, args without the side ones, meta) of dW_down = dy.T @ h in CODA's ping-pong
    kernel, with the map partition when `map_regs`; `regs`: (maxnreg, MMA_REGS, LOAD_REGS)."""
    launch = PLAIN.bind(dy.T, h)
    built = PLAIN.triton._build(km._signature(launch, "pingpong"), "pingpong")
    recorder = Recorder(built.fn.arg_names)
    plan = km.Plan(km.Kernel("pingpong", built.source, recorder, None), config, launch)
    out = torch.full((dy.shape[1], h.shape[1]), float("nan"), dtype=dy.dtype, device=dy.device)
    plan.run(launch.a, launch.b, launch.values, out, 0)
    meta = dict(recorder.meta)
    if map_regs:
        meta["maxnreg"], meta["MMA_REGS"], meta["LOAD_REGS"] = regs
        module = load_module(side_source(built.source, map_regs), f"{map_regs}_{regs[0]}")
        fn = getattr(module, built.fn.__name__)
    else:
        fn = built.fn
    return fn, plan.grid, list(recorder.args), meta, out


def compile_only(variants) -> None:
    """Build each variant for sm_90 without a GPU and print ptxas's registers and spills."""
    import triton
    from test_hopper_compiles import _type, ptxas_report
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    km._num_sms = lambda device: 132
    m, hdim, f = 16384, 2048, 5632
    dy = torch.empty(m, hdim, dtype=torch.bfloat16)
    h = torch.empty(m, f, dtype=torch.bfloat16)
    side = [h, h, h, torch.empty(m, 2 * f, dtype=torch.bfloat16), m, f, f, 2 * f]
    for map_regs, regs in variants:
        fn, _, args, meta, _ = dw_launch(dy, h, CONFIG, map_regs, regs)
        if map_regs:
            args = args + side
        meta = dict(meta)
        options = {key: meta.pop(key) for key in ("num_warps", "num_stages", "maxnreg") if key in meta}
        values = dict(zip([p for p in fn.arg_names if p not in meta], args, strict=True))
        signature = {p: "constexpr" if p in meta else _type(values[p]) for p in fn.arg_names}
        try:
            compiled = triton.compile(GluonASTSource(fn, signature, constexprs=meta),
                                      target=GPUTarget("cuda", 90, 32), options=options)
        except Exception as err:
            print(map_regs, regs, "FAILED", type(err).__name__, str(err).splitlines()[-1][:300])
            continue
        print(map_regs, regs, ptxas_report(compiled.asm["ptx"]), "shared", compiled.metadata.shared)


def main() -> None:
    from kernel_configs import graph_us

    torch.manual_seed(0)
    dev, bf16 = "cuda", torch.bfloat16
    m, hdim, f = 16384, 2048, 5632
    dy = torch.randn(m, hdim, device=dev, dtype=bf16)
    w_down = torch.randn(hdim, f, device=dev, dtype=bf16) / hdim ** 0.5   # nn.Linear's [O, F]
    h = torch.randn(m, f, device=dev, dtype=bf16)
    g = torch.randn(m, f, device=dev, dtype=bf16)
    u = torch.randn(m, f, device=dev, dtype=bf16)
    grad = grad_program("silu", None, False)
    results = {"gpu": torch.cuda.get_device_name(), "shape": [m, hdim, f]}

    fused = lambda: grad(dy, w_down, g=g, u=u)["output"]  # noqa: E731
    plain_dh = lambda: PLAIN(dy, w_down)["output"]  # noqa: E731
    dh = plain_dh()
    gmap = lambda: grad.map(dh, g=g, u=u)["output"]  # noqa: E731
    cublas_dw = lambda: torch.mm(dy.T, h)  # noqa: E731
    dpre_map = gmap()

    # correctness of the pieces: dpre against float32 math, dW against cuBLAS
    dh32 = dy.float() @ w_down.float()
    s = torch.sigmoid(g.float())
    ref = torch.stack([dh32 * u.float() * s * (1 + g.float() * (1 - s)), dh32 * g.float() * s], -1)
    ref = ref.reshape(m, 2 * f)
    results["fused_dpre_rel_err"] = ((fused().float() - ref).norm() / ref.norm()).item()
    results["map_dpre_rel_err"] = ((dpre_map.float() - ref).norm() / ref.norm()).item()
    dw_ref = cublas_dw().float()

    times = {"fused_grad": graph_us(fused, 10), "plain_dh": graph_us(plain_dh, 10),
             "map": graph_us(gmap, 10), "cublas_dw": graph_us(cublas_dw, 10)}
    km._ensure_allocator()
    runs = {}
    for label, (map_regs, regs) in VARIANTS.items():
        try:
            fn, grid, args, meta, out = dw_launch(dy, h, CONFIG, map_regs, regs)
            dpre = torch.full((m, 2 * f), float("nan"), device=dev, dtype=bf16)
            side = [dh, g, u, dpre, m, f, f, 2 * f] if map_regs else []
            idle = [dh, g, u, dpre, 0, f, f, 2 * f] if map_regs else []
            launch = lambda fn=fn, grid=grid, args=args, meta=meta, side=side: fn[grid](*args, *side, **meta)  # noqa: E731
            launch()
            torch.cuda.synchronize()
            entry = {"dw_rel_err_vs_cublas": ((out.float() - dw_ref).norm() / dw_ref.norm()).item()}
            if map_regs:
                entry["dpre_equal_to_map"] = bool(torch.equal(dpre, dpre_map))
                entry["dpre_max_diff_vs_map"] = (dpre.float() - dpre_map.float()).abs().max().item()
                entry["us"] = graph_us(launch, 10)
                entry["us_map_idle"] = graph_us(lambda: fn[grid](*args, *idle, **meta), 10)
                entry["pair_us"] = graph_us(lambda: (plain_dh(), launch()), 10)
                # the map beside a GEMM of 16 tiles (h's first 128 columns): the map partition's own pace
                sfn, sgrid, sargs, smeta, _ = dw_launch(dy, h[:, :128], CONFIG, map_regs, regs)
                entry["us_small_gemm"] = graph_us(lambda: sfn[sgrid](*sargs, *side, **smeta), 10)
            else:
                entry["us"] = graph_us(launch, 10)
            runs[label] = entry
        except Exception as err:
            runs[label] = {"error": f"{type(err).__name__}: {str(err)[:400]}"}
        print(label, runs[label], flush=True)
    times["current_pair"] = graph_us(lambda: (fused(), cublas_dw()), 10)
    times["plain_dh+map+cublas_dw"] = graph_us(lambda: (plain_dh(), gmap(), cublas_dw()), 10)
    results |= {"times_us": times, "side": runs}
    print(json.dumps(results, indent=1))
    out_dir = Path(os.environ.get("OUT", "."))
    (out_dir / "side_map.json").write_text(json.dumps(results, indent=1))


from coda.codegen.tuning import Config  # noqa: E402

#: the ping-pong configuration of the dW GEMM (the heuristic's for K <= 1024)
CONFIG = Config(128, 128, 64, 4, 4, split_epilogue=2, pingpong=True)
#: label -> (the map partition's registers, 0: none; (maxnreg, MMA_REGS, LOAD_REGS))
#: 13 warps launch as 16 (whole warpgroups): 512 threads share the 64K registers at 128 each;
#: the default MMA partition gets what the workers leave of 4 x 128
VARIANTS = {"pingpong_dw": (0, (168, 232, 40)),
            "side_r88": (88, (128, 200, 24)),
            "side_r104": (104, (128, 192, 24)),
            "side_r120": (120, (128, 184, 24))}

if __name__ == "__main__":
    if "--compile-only" in sys.argv:
        compile_only(VARIANTS.values())
    else:
        main()
