"""Twenty-third session: BERT's q/k/v projection backward, four ways (H200, bf16).

BERT's q/k/v is one linear [2304, 768] on x [16384, 768] whose input also feeds the residual
(post-norm: LN(x + attention(x))), so x's gradient is the projection's dx plus the residual's
dres. SDPA's backward gives dq, dk, dv as three [16384, 768] tensors. µs per backward from CUDA
graphs of 20 (median of 5 replays), twice, interleaved:
  cat_cublas     cat(dq, dk, dv); dx = g @ w (cuBLAS); dx + dres (autograd's add); dw = g.T @ x
                 (cuBLAS); db = column_sum(g)                                    (BERT today)
  cat_fused_add  cat; dx = g @ w + dres in one CODA GEMM (ADD_PARTIAL); dw, db as above
  concat_coda    no cat: dx = Concat @ w + dres (CODA, one K loop a piece); dw as three cuBLAS
                 GEMMs into dw's row blocks; db as three column sums
  pieces_cublas  no cat: dx = dres + dq @ wq, += dk @ wk, += dv @ wv (cuBLAS, beta = 1); dw, db
                 as in concat_coda
and each one's dx, dw, db against the first's. Writes $OUT/qkv_probe.json.
"""

import json
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from kernel_configs import graph_us  # benchmarks/kernel_configs.py

import coda
from coda.ops.common import ADD_PARTIAL, column_sum

M, C = 16384, 768
REPS = 20



def main() -> None:
    torch.manual_seed(0)
    dt, dev = torch.bfloat16, "cuda"
    dq, dk, dv = (torch.randn(M, C, device=dev, dtype=dt) for _ in range(3))
    x, dres = torch.randn(M, C, device=dev, dtype=dt), torch.randn(M, C, device=dev, dtype=dt)
    w = torch.randn(3 * C, C, device=dev, dtype=dt) * C ** -0.5
    parts = [w[i * C:(i + 1) * C] for i in range(3)]

    def three_dw():
        dw = torch.empty_like(w)
        for i, piece in enumerate((dq, dk, dv)):
            torch.matmul(piece.T, x, out=dw[i * C:(i + 1) * C])
        return dw

    def cat_cublas():
        g = torch.cat([dq, dk, dv], 1)
        return torch.matmul(g, w) + dres, torch.matmul(g.T, x), column_sum(g)

    def cat_fused_add():
        g = torch.cat([dq, dk, dv], 1)
        return ADD_PARTIAL(g, w, partial=dres)["output"], torch.matmul(g.T, x), column_sum(g)

    def concat_coda():
        g = coda.Concat((dq, dk, dv), dim=1)
        return ADD_PARTIAL(g, w, partial=dres)["output"], three_dw(), column_sum(g)

    def pieces_cublas():
        dx = torch.addmm(dres, dq, parts[0])
        dx.addmm_(dk, parts[1])
        dx.addmm_(dv, parts[2])
        return dx, three_dw(), column_sum(coda.Concat((dq, dk, dv), dim=1))

    variants = dict(cat_cublas=cat_cublas, cat_fused_add=cat_fused_add, concat_coda=concat_coda,
                    pieces_cublas=pieces_cublas)
    first = cat_cublas()
    results = {"shape": [M, 3 * C, C], "gpu": torch.cuda.get_device_name(), "us": {}, "max_rel_diff": {}}
    for name, fn in variants.items():
        got = fn()
        results["max_rel_diff"][name] = [((a.float() - b.float()).abs().max() / b.float().abs().max()).item()
                                         for a, b in zip(got, first, strict=True)]
    for _ in range(2):
        for name, fn in variants.items():
            results["us"].setdefault(name, []).append(graph_us(fn, REPS))
    for name in variants:
        print(name, [round(t, 1) for t in results["us"][name]], results["max_rel_diff"][name], flush=True)
    with open(os.path.join(os.environ.get("OUT", "."), "qkv_probe.json"), "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
