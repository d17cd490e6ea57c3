"""GPT-2's LayerNorm maps (16384 x 768, bf16) in each of a few tile configurations, beside the
one `coda.codegen.tuning.map_config` picks: µs from CUDA graphs (the finishing kernel included),
medians of two passes. In the thirty-fifth session's GPT-2 profile `layer_norm_sums` (a and b per
row, dg and dβ per column, no tile stored: 2 x 25 MB read) took 25.2 µs, about 2 TB/s where
the layer-norm forward map (25 MB read, 25 MB written) took 12.4 µs; ln_dx 31.2 µs.

    PYTHONPATH=$PWD/src CODA_AUTOTUNE=0 python benchmarks/results/session36/map_probe.py

On a CPU with TRITON_INTERPRET=1 it runs each configuration once at a small shape (96 x 192,
float32) and checks it against the default's outputs, without timing.
"""

from __future__ import annotations

import statistics

import torch

from coda.codegen.tuning import Config
from coda.nn.layer_norm import LAYER_NORM, LN_GRAD_DX, LN_GRAD_SUMS
from coda.ops.norms import LN_DX

CUDA = torch.cuda.is_available()
DEVICE, DTYPE = ("cuda", torch.bfloat16) if CUDA else ("cpu", torch.float32)
M, N = (16384, 768) if CUDA else (96, 192)

#: (BLOCK_M, BLOCK_N, warps) tried for a map that stores no tile, and for one that stores a tile
SUMS = [(128, 64, 4), (64, 64, 4), (64, 128, 4), (32, 128, 4), (32, 256, 4), (16, 256, 4),
        (128, 64, 8), (128, 128, 8), (64, 256, 8), (256, 64, 8)]
TILES = [(32, 128, 4), (16, 128, 4), (16, 256, 4), (8, 256, 4), (32, 256, 8), (64, 128, 8),
         (64, 64, 4), (32, 64, 4)]


def randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, device=DEVICE).to(DTYPE)


x, dy, dres, g, beta = randn(M, N), randn(M, N), randn(M, N), randn(N), randn(N)
row = dict(shift=x[:, 0].float().contiguous(), s=(x.float() - x[:, :1].float()).sum(1),
           ss=((x.float() - x[:, :1].float()) ** 2).sum(1), inv_n=1.0 / N, eps=1e-5)
sums = LN_GRAD_SUMS.map(dy, **row, g=g, xin=x, outputs=["a", "b"])
cases = {  # name: (program, input, operands, launch options, configurations)
    "layer_norm_sums (a, b, dg, dbeta)": (LN_GRAD_SUMS, dy, dict(row, g=g, xin=x),
                                          dict(outputs=["a", "b", "dg", "dbeta"]), SUMS),
    "layer_norm_dx (+ dres)": (LN_GRAD_DX[True], dy, dict(row, g=g, xin=x, a=sums["a"], b=sums["b"],
                                                          dres=dres), {}, TILES),
    "ln_dx (+ dres, saves xhat)": (LN_DX[True], dy, dict(row, xin=x, a=sums["a"], b=sums["b"],
                                                         dres=dres), {}, TILES),
    "layer_norm (forward)": (LAYER_NORM, x, dict(row, g=g, beta=beta), {}, TILES),
}


def close(got: dict, want: dict) -> bool:
    return all(torch.allclose(got[k].float(), want[k].float(), rtol=2e-2, atol=2e-2) for k in want)


for name, (program, inp, operands, options, configs) in cases.items():
    launch = program.bind(inp, None, **operands, **options)
    default = program.triton.launch(launch)
    chosen = program.triton.config(launch, program.triton.kernel(launch))
    print(f"{name}: map_config picks {chosen.block_m}x{chosen.block_n}, {chosen.num_warps} warps")
    times = {}
    for bm, bn, warps in configs:
        config = Config(bm, bn, 0, num_warps=warps)
        got = program.triton.launch(launch, config)
        ok = close(got, default)
        if not CUDA:
            print(f"  {bm}x{bn} {warps} warps: {'same' if ok else 'DIFFERENT'} (interpreter: not timed)")
            continue
        import triton.testing

        runs = [1e3 * triton.testing.do_bench_cudagraph(lambda c=config: program.triton.launch(launch, c),
                                                        rep=50, return_mode="median") for _ in range(2)]
        times[(bm, bn, warps)] = statistics.median(runs)
        print(f"  {bm:4d}x{bn:<4d} {warps} warps {times[(bm, bn, warps)]:7.1f} us"
              f"{'' if ok else '  OUTPUTS DIFFER'}", flush=True)
    if times:
        best = min(times, key=times.get)
        print(f"  fastest: {best[0]}x{best[1]}, {best[2]} warps, {times[best]:.1f} us", flush=True)
