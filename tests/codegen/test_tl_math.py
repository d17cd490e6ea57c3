"""Device functions of the generated epilogues (codegen/tl_math.py), run by Triton (the
interpreter on a CPU-only machine): dropout's keep bits drawn ahead of the epilogue, packed four
a Philox call (`keep_codes`) and unpacked (`keep_mask`), are the mask the epilogue draws itself
and the reference's (runtime/rng.py)."""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from coda.codegen import tl_math as cm
from coda.runtime import rng


@triton.jit
def _masks(drawn, ahead, row0, col0, seed, p, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = row0 + tl.arange(0, BLOCK_M)
    cols = col0 + tl.arange(0, BLOCK_N)
    offsets = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    threshold = cm.keep_threshold(p)
    tl.store(drawn + offsets, (cm.random_bits(seed, rows, cols, BLOCK_M, BLOCK_N) >= threshold).to(tl.int8))
    codes = cm.keep_codes(seed, rows, cols, threshold, BLOCK_M, BLOCK_N)
    tl.store(ahead + offsets, cm.keep_mask(codes, BLOCK_M, BLOCK_N).to(tl.int8))


@pytest.mark.parametrize("seed, p, row0, col0", [(0, 0.1, 0, 0), (12345, 0.5, 48, 70),
                                                 (-7, 0.9, 4096, 1 << 20), (3, 0.0, 16, 2)])
def test_keep_bits_drawn_ahead_are_the_epilogues_mask(seed, p, row0, col0):
    device = "cuda" if torch.cuda.is_available() else "cpu"
    block_m, block_n = 32, 16
    drawn = torch.full((block_m, block_n), -1, dtype=torch.int8, device=device)   # poisoned
    ahead = torch.full_like(drawn, -1)
    _masks[(1,)](drawn, ahead, row0, col0, seed, p, BLOCK_M=block_m, BLOCK_N=block_n)
    rows = torch.arange(row0, row0 + block_m)[:, None]
    cols = torch.arange(col0, col0 + block_n)[None, :]
    expected = rng.uniform(rng.seed_word(seed) & 0xFFFFFFFF, rows, cols) >= p
    assert torch.equal(drawn.cpu().bool(), expected)
    assert torch.equal(ahead.cpu(), drawn.cpu())
