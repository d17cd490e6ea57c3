"""The Triton kernel behind `common.column_sum` on a GPU (imported on first use: importing `coda`
does not import Triton): the sum over the rows of t [M, N] -> [N], a bias's gradient.

A column sum reads M·N values and writes N: it is a stream, and its speed is how many bytes
each SM keeps in flight. The grid is (column strips of BLOCK_N) × (SPLIT parts of the rows);
each program walks its part's rows BLOCK_M at a time through a pipelined loop (STAGES loads in
flight), sums them in float32 and stores its partial. The last program of a strip to finish (a
ticket taken with an atomic add) adds the strip's SPLIT partials in part order and writes the
result, then puts the ticket back to zero for the next launch: no second kernel, and the result
does not depend on which program finishes last. A Concat's pieces (joined along columns) are
read where they lie: a strip belongs to one piece (the pieces' widths are multiples of
BLOCK_N, else the caller joins them).
"""

import math

import torch
import triton
import triton.language as tl

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


#: The tile the launches take unless told otherwise (a piece's width must be a multiple of its
#: columns, but for the last piece's).
BLOCK_N = 64


def fits(pieces: tuple[torch.Tensor, ...]) -> bool:
    """Whether the kernel reads these pieces (joined along columns) as they lie: up to three 2-D
    tensors of one float dtype (bf16, fp16 or fp32) and device, rows in common, unit column
    strides, every piece but the last a multiple of BLOCK_N wide."""
    first = pieces[0]
    return (len(pieces) <= 3 and first.dtype in (torch.bfloat16, torch.float16, torch.float32)
            and all(p.dim() == 2 and p.dtype == first.dtype and p.device == first.device
                    and p.shape[0] == first.shape[0] and (p.stride(1) == 1 or p.shape[1] == 1)
                    for p in pieces)
            and all(p.shape[1] % BLOCK_N == 0 for p in pieces[:-1]))


def launch(pieces: list[torch.Tensor], out: torch.Tensor, block_m: int = 64, block_n: int = BLOCK_N,
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
