"""A bias gradient's column sum: CODA's SUMS map (+ its finishing kernel), torch.sum, and the
hand-written kernel of coda.ops.column_sum in several shapes, from CUDA graphs (µs).

    python benchmarks/results/session29/column_sum_probe.py
"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))   # benchmarks/
from kernel_configs import graph_us

from coda.ops import column_sum_kernel as column_sum
from coda.ops.common import SUMS
from coda.runtime.binding import Concat

CONFIGS = [  # block_m, block_n, warps, stages, programs per SM (0: one part per strip)
    (64, 64, 4, 4, 4), (32, 64, 4, 4, 4), (64, 64, 4, 3, 8), (128, 64, 8, 4, 4), (64, 128, 4, 4, 4),
    (64, 128, 8, 4, 2), (32, 128, 4, 6, 4), (64, 32, 2, 4, 8), (128, 32, 4, 6, 0), (256, 16, 4, 8, 0),
    (64, 64, 4, 6, 2), (128, 128, 8, 3, 2)]


def main() -> None:
    torch.manual_seed(0)
    m = 16384
    cases = {"768": [torch.randn(m, 768, device="cuda", dtype=torch.bfloat16)],
             "3x768 (q/k/v pieces)": [torch.randn(m, 768, device="cuda", dtype=torch.bfloat16)
                                      for _ in range(3)],
             "3072": [torch.randn(m, 3072, device="cuda", dtype=torch.bfloat16)]}
    for name, pieces in cases.items():
        whole = torch.cat(pieces, 1)
        ref = whole.double().sum(0)
        scale = whole.double().abs().sum(0)
        n = whole.shape[1]
        a = Concat(pieces, 1) if len(pieces) > 1 else pieces[0]
        bytes_us = whole.numel() * 2 / 4.0e6   # at 4 TB/s
        print(f"{name}: {bytes_us:.1f} us at 4 TB/s", flush=True)
        us = graph_us(lambda: SUMS.map(a, outputs=["cols"]), 20)
        print(f"  SUMS map + finish      {us:7.2f} us", flush=True)
        us = graph_us(lambda: whole.sum(0, dtype=torch.float32), 20)
        print(f"  torch.sum (joined)     {us:7.2f} us", flush=True)
        out = torch.empty(n, device="cuda", dtype=torch.float32)
        for bm, bn, w, st, pps in CONFIGS:
            out.fill_(float("nan"))
            column_sum.launch(pieces, out, bm, bn, w, st, pps)
            err = ((out.double() - ref).abs() / scale).max().item()
            us = graph_us(lambda: column_sum.launch(pieces, out, bm, bn, w, st, pps), 20)
            print(f"  kernel {bm}x{bn} w{w} s{st} p{pps}: {us:7.2f} us  max rel err {err:.1e}", flush=True)


if __name__ == "__main__":
    main()
