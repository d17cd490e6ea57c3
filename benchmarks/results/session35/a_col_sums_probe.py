"""Branch a-col-sums: BERT's q/k/v dx and the three GPT-2 GEMMs that take a bias gradient with
`a_col_sums=True`, each with and without the sums, beside the column-sum map they replace (and, for the
out-projection's dx, cuBLAS's GEMM it replaces), µs from CUDA graphs, alternated twice.

    PYTHONPATH=$PWD/src CODA_AUTOTUNE=0 python benchmarks/results/session35/a_col_sums_probe.py
"""

from __future__ import annotations

import statistics

import torch
import triton.testing

import coda
from coda.ops.common import PLAIN, column_sum
from coda.ops.linear import backward_program
from coda.ops.norms import LN_DXHAT

BF16, T, C = torch.bfloat16, 16384, 768


def randn(*shape):
    return torch.randn(*shape, device="cuda").to(BF16)


def us(fn) -> float:
    return 1e3 * triton.testing.do_bench_cudagraph(fn, rep=100, return_mode="median")


dy, w_out = randn(T, C), randn(C, C)
w2, slope = randn(C, 4 * C), randn(T, 4 * C)
dqkv, w_attn, xin = [randn(T, C) for _ in range(3)], randn(3 * C, C), randn(T, C)
row = dict(shift=torch.zeros(T, device="cuda"), s=xin.float().sum(1), ss=(xin.float() ** 2).sum(1),
           inv_n=1.0 / C, eps=1e-5)
gelu_grad = backward_program("gelu", False, True)
cat = coda.Concat(dqkv, 1)
dqkv_flat = randn(T, 3 * C)
cases = {
    "BERT q/k/v dx: cuBLAS + column-sum map": lambda: (dqkv_flat @ w_attn, column_sum(dqkv_flat, BF16)),
    "BERT q/k/v dx: CODA, no sums": lambda: PLAIN(dqkv_flat, w_attn),
    "BERT q/k/v dx: CODA, a_col_sums": lambda: PLAIN(dqkv_flat, w_attn, a_col_sums=True),
    "out-projection dx: cuBLAS + column-sum map": lambda: (dy @ w_out, column_sum(dy, BF16)),
    "out-projection dx: CODA, no sums": lambda: PLAIN(dy, w_out),
    "out-projection dx: CODA, a_col_sums": lambda: PLAIN(dy, w_out, a_col_sums=True),
    "fc2 dh (gelu_grad): + column-sum map": lambda: (gelu_grad(dy, w2, slope=slope), column_sum(dy, BF16)),
    "fc2 dh (gelu_grad): a_col_sums": lambda: gelu_grad(dy, w2, slope=slope, a_col_sums=True),
    "ln_1 dxhat (Concat): + column-sum map": lambda: (LN_DXHAT(cat, w_attn, **row, g=w_attn[0], xin=xin),
                                                      column_sum(cat)),
    "ln_1 dxhat (Concat): a_col_sums": lambda: LN_DXHAT(cat, w_attn, **row, g=w_attn[0], xin=xin,
                                                        a_col_sums=True),
}
for fn in cases.values():   # compile and capture once
    fn()
torch.cuda.synchronize()
times = {name: [] for name in cases}
for _ in range(2):
    for name, fn in cases.items():
        times[name].append(us(fn))
for name, t in times.items():
    print(f"{name:48s} {statistics.median(t):8.1f} us  ({', '.join(f'{x:.1f}' for x in t)})")
