"""The counter-based dropout RNG, in PyTorch: Philox-2x32 with 10 rounds.

The random number of an element depends only on (seed, global row, global column). One Philox
call, on counter (column // 4, row) under key seed mod 2**32, gives 64 random bits: four 16-bit
uniforms, for columns 4j .. 4j+3 (low half of the first word, high half, then the second word).
So a dropout probability acts with a resolution of 2**-16. The Triton backend runs the same
rounds on uint32 values (`coda.codegen.tl_math.uniform4`), so the reference and the kernels draw
identical masks, and a backward pass regenerates its forward mask from the seed, whatever the
tiling.
"""

from __future__ import annotations

import torch

PHILOX_MULTIPLIER = 0xD256D193
PHILOX_WEYL = 0x9E3779B9
PHILOX_ROUNDS = 10
_MASK32 = 0xFFFFFFFF


def seed_word(seed: int | None) -> int:
    """The 32 key bits of a seed, as a signed 32-bit integer: kernels then always receive an
    int32 argument (their key is its bit pattern), whatever the seed's size."""
    word = int(seed or 0) & _MASK32
    return word - (1 << 32) if word >= 1 << 31 else word


def _mulhilo(a: int, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """High and low 32 bits of a * b for 32-bit a and b, without overflowing int64."""
    b_hi, b_lo = b >> 16, b & 0xFFFF
    low_part = a * b_lo          # < 2**48
    high_part = a * b_hi         # < 2**48
    lo = (((high_part & 0xFFFF) << 16) + low_part) & _MASK32
    hi = (high_part + (low_part >> 16)) >> 16
    return hi & _MASK32, lo


def philox(seed: int, c0: torch.Tensor, c1: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Philox-2x32-10 of the counter (c0, c1) under key `seed`: two uint32 words (as int64)."""
    c0, c1 = c0 & _MASK32, c1 & _MASK32
    key = seed & _MASK32
    for _ in range(PHILOX_ROUNDS):
        hi, lo = _mulhilo(PHILOX_MULTIPLIER, c0)
        c0, c1 = hi ^ c1 ^ key, lo
        key = (key + PHILOX_WEYL) & _MASK32
    return c0, c1


def uniform(seed: int, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """Uniform float32 numbers in [0, 1), multiples of 2**-16, for each (row, col) pair."""
    rows, cols = torch.broadcast_tensors(rows.to(torch.int64), cols.to(torch.int64))
    first, second = philox(seed, cols >> 2, rows)
    word = torch.where((cols & 2) == 0, first, second)
    bits = torch.where((cols & 1) == 0, word & 0xFFFF, word >> 16)
    return bits.to(torch.float32) * 2.0**-16


def dropout_mask(seed: int, p: float | torch.Tensor, m: int, n: int, device=None) -> torch.Tensor:
    """The keep-mask of dropout with probability p over an [m, n] domain (True = kept)."""
    rows = torch.arange(m, device=device)[:, None]
    cols = torch.arange(n, device=device)[None, :]
    return uniform(seed, rows, cols) >= p
