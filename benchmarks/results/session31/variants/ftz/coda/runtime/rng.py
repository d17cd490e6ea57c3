"""The counter-based dropout RNG, in PyTorch: Philox-2x32 with 10 rounds.

The random number of an element depends only on (seed, global row, global column). One Philox
call gives 64 random bits, four 16-bit numbers, for a block of four elements: rows r and r + 8 of
a 16-row group (r % 16 < 8) and columns 2j and 2j + 1. Its counter is (j, 8 * (r // 16) + r % 8)
under key seed mod 2**32; row r takes the first word, row r + 8 the second, column 2j a word's
low half and 2j + 1 its high half. (That block is what one thread holds of a Hopper wgmma
accumulator, so the Gluon kernel draws its numbers where they are used.) A dropout probability
acts with a resolution of 2**-16. The Triton backend runs the same rounds on uint32 values
(`coda.codegen.tl_math.random_bits`), so the reference and the kernels draw identical masks,
and a backward pass regenerates its forward mask from the seed, whatever the tiling.
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
    first, second = philox(seed, cols >> 1, ((rows >> 4) << 3) + (rows & 7))
    word = torch.where((rows & 8) == 0, first, second)
    bits = torch.where((cols & 1) == 0, word & 0xFFFF, word >> 16)
    return bits.to(torch.float32) * 2.0**-16


def dropout_mask(seed: int, p: float | torch.Tensor, m: int, n: int, device=None) -> torch.Tensor:
    """The keep-mask of dropout with probability p over an [m, n] domain (True = kept)."""
    rows = torch.arange(m, device=device)[:, None]
    cols = torch.arange(n, device=device)[None, :]
    return uniform(seed, rows, cols) >= p
