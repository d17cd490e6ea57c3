"""A bias gradient's column sum: CODA's SUMS map (+ its finishing kernel), torch.sum, and a
hand-written kernel (below) in several shapes, from CUDA graphs (µs).

    python benchmarks/results/session29/column_sum_probe.py

The kernel (tried in the twenty-ninth session as `coda.ops.column_sum_kernel`, not kept: its
best shape was 16% faster than the SUMS map on GPT-2's q/k/v gradient, no faster at width 768,
docs/performance.md): a grid of (column strips of BLOCK_N) x (SPLIT parts of the rows); each
program walks its part's rows BLOCK_M at a time through a pipelined loop, sums them in float32
and stores its partial; the last program of a strip to finish (a ticket taken with an atomic
add) adds the strip's partials in part order, writes the result and puts the ticket back to
zero. A Concat's pieces (joined along columns) are read where they lie.
"""

import math
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))   # benchmarks/
from kernel_configs import graph_us

from coda.ops.common import SUMS
from coda.runtime.binding import Concat

#: Programs per SM the grid aims at (SPLIT parts per strip times the strips).
PROGRAMS_PER_SM = 4


@triton.jit
def column_sum_kernel(X0, X1, X2, CUT1, CUT2, STRIDE0, STRIDE1, STRIDE2, M, N, rows_per_part,
                      PARTIALS, TICKETS, OUT, SPLIT: tl.constexpr, BLOCK_M: tl.constexpr,
                      BLOCK_N: tl.constexpr, STAGES: tl.constexpr):
    strip = tl.program_id(0)
    part = tl.program_id(1)
    first_col = strip * BLOCK_N
    cols = first_col + tl.arange(0, BLOCK_N)
    in_cols = cols < N
    # the piece that holds this strip, and the strip's columns within it
    if first_col >= CUT2:
        base, stride, local = X2, STRIDE2, cols - CUT2
    elif first_col >= CUT1:
        base, stride, local = X1, STRIDE1, cols - CUT1
    else:
        base, stride, local = X0, STRIDE0, cols
    total = tl.zeros([BLOCK_N], dtype=tl.float32)
    start = part * rows_per_part
    end = tl.minimum(start + rows_per_part, M)
    for r0 in tl.range(start, end, BLOCK_M, num_stages=STAGES):
        rows = r0 + tl.arange(0, BLOCK_M)
        x = tl.load(base + rows[:, None] * stride + local[None, :],
                    mask=(rows < end)[:, None] & in_cols[None, :], other=0.0)
        total += tl.sum(x.to(tl.float32), axis=0)
    tl.store(PARTIALS + part * N + cols, total, mask=in_cols)
    # every thread's partial is stored before the ticket is taken (release), and the last
    # program reads the others' partials after it (acquire), past the L1 cache
    tl.debug_barrier()
    ticket = tl.atomic_add(TICKETS + strip, 1, sem="acq_rel", scope="gpu")
    if ticket == SPLIT - 1:
        result = tl.zeros([BLOCK_N], dtype=tl.float32)
        for p in range(SPLIT):
            result += tl.load(PARTIALS + p * N + cols, mask=in_cols, other=0.0, cache_modifier=".cg")
        tl.store(OUT + cols, result.to(OUT.dtype.element_ty), mask=in_cols)
        tl.atomic_xchg(TICKETS + strip, 0, sem="relaxed", scope="gpu")


#: Ticket counters per (device, stream): zero between launches (the last program of a strip
#: resets its counter), so one set serves every launch on a stream, and launches on other streams
#: never share one. Under CUDA graph capture the capture stream gets its own, allocated (and
#: zero-filled) in the graph's memory pool: one fill node at the start of the graph.
_tickets: dict[tuple[torch.device, int], torch.Tensor] = {}


def _tickets_for(device: torch.device, strips: int) -> torch.Tensor:
    stream = torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else 0
    tickets = _tickets.get((device, stream))
    if tickets is None or tickets.numel() < strips:
        tickets = _tickets[(device, stream)] = torch.zeros(max(strips, 64), dtype=torch.int32,
                                                          device=device)
    return tickets


def launch(pieces: list[torch.Tensor], out: torch.Tensor, block_m: int = 64, block_n: int = 64,
           warps: int = 4, stages: int = 4, programs_per_sm: int = PROGRAMS_PER_SM) -> torch.Tensor:
    """out [N] (float32 or the gradient's dtype) = the column sums of the pieces [M, n_i] joined
    along columns (each with unit column stride; every piece but the last n_i a multiple of
    block_n)."""
    m = pieces[0].shape[0]
    widths = [p.shape[1] for p in pieces]
    n = sum(widths)
    cuts = [sum(widths[:i]) for i in range(1, len(pieces))] + [n] * (3 - len(pieces))
    xs = pieces + [pieces[0]] * (3 - len(pieces))
    strides = [p.stride(0) for p in xs]
    strips = triton.cdiv(n, block_n)
    sms = (torch.cuda.get_device_properties(out.device).multi_processor_count
           if out.is_cuda else 4)
    split = max(1, min(triton.cdiv(m, block_m), math.ceil(programs_per_sm * sms / strips)))
    rows_per_part = triton.cdiv(triton.cdiv(m, split), block_m) * block_m
    split = triton.cdiv(m, rows_per_part)
    partials = torch.empty(split, n, dtype=torch.float32, device=out.device)
    column_sum_kernel[(strips, split)](*xs, *cuts[:2], *strides, m, n, rows_per_part, partials,
                                       _tickets_for(out.device, strips), out, SPLIT=split,
                                       BLOCK_M=block_m, BLOCK_N=block_n, STAGES=stages,
                                       num_warps=warps)
    return out


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
            launch(pieces, out, bm, bn, w, st, pps)
            err = ((out.double() - ref).abs() / scale).max().item()
            us = graph_us(lambda: launch(pieces, out, bm, bn, w, st, pps), 20)
            print(f"  kernel {bm}x{bn} w{w} s{st} p{pps}: {us:7.2f} us  max rel err {err:.1e}", flush=True)


if __name__ == "__main__":
    main()
