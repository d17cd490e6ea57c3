"""The counter-based dropout RNG against a pure-Python Philox2x32-10."""

from __future__ import annotations

import math
import random

import pytest
import torch

from coda.runtime import rng
from oracle import philox2x32_10, philox_uniform

# Random123's known-answer vectors for philox2x32-10: (ctr0, ctr1, key) -> (out0, out1).
KAT = [
    (0x00000000, 0x00000000, 0x00000000, 0xFF1DAE59, 0x6CD10DF2),
    (0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0x2C3F628B, 0xAB4FD7AD),
    (0x243F6A88, 0x85A308D3, 0x13198A2E, 0xDD7CE038, 0xF62A4C12),
]


@pytest.mark.parametrize("c0, c1, key, out0, out1", KAT)
def test_python_philox_matches_random123_known_answers(c0, c1, key, out0, out1):
    assert philox2x32_10(c0, c1, key) == (out0, out1)


@pytest.mark.parametrize("c0, c1, key, out0, out1", KAT)
def test_torch_philox_matches_random123_known_answers(c0, c1, key, out0, out1):
    first, second = rng.philox(key, torch.tensor([c0]), torch.tensor([c1]))
    assert (first.item(), second.item()) == (out0, out1)


@pytest.mark.parametrize("c0, c1, key, out0, out1", KAT[:1] + KAT[2:])
def test_uniform_takes_16_bit_quarters_of_one_philox_call(c0, c1, key, out0, out1):
    # counter (col // 2, 8 * (row // 16) + row % 8): columns 2*c0, 2*c0 + 1 of rows r and r + 8
    # (r = 16 * (c1 // 8) + c1 % 8) share one call
    r = 16 * (c1 // 8) + c1 % 8
    got = rng.uniform(key, torch.tensor([[r], [r + 8]]), torch.tensor([[2 * c0, 2 * c0 + 1]]))
    assert got.dtype == torch.float32
    quarters = [[out0 & 0xFFFF, out0 >> 16], [out1 & 0xFFFF, out1 >> 16]]
    assert got.tolist() == [[q * 2.0**-16 for q in row] for row in quarters]


def test_constants():
    assert rng.PHILOX_MULTIPLIER == 0xD256D193
    assert rng.PHILOX_WEYL == 0x9E3779B9
    assert rng.PHILOX_ROUNDS == 10


@pytest.mark.parametrize("seed", [0, 1, 42, 0x7FFFFFFF, 0xFFFFFFFF, 0xDEADBEEF])
def test_uniform_matches_python_philox_on_a_grid(seed):
    rows = torch.tensor([0, 1, 2, 3, 127, 128, 4095, 65535, 65536, 2**31 - 1, 2**32 - 1])
    cols = torch.tensor([0, 1, 5, 63, 64, 1000, 65537, 2**24 + 3, 2**31, 2**32 - 2])
    got = rng.uniform(seed, rows[:, None], cols[None, :])
    assert got.shape == (len(rows), len(cols))
    for i, r in enumerate(rows.tolist()):
        for j, c in enumerate(cols.tolist()):
            assert got[i, j].item() == philox_uniform(seed, r, c), (seed, r, c)


def test_uniform_matches_python_philox_at_random_points():
    gen = random.Random(1234)
    points = [(gen.getrandbits(32), gen.getrandbits(31), gen.getrandbits(31)) for _ in range(300)]
    for seed in {s for s, _, _ in points[:5]}:
        rows = torch.tensor([r for _, r, _ in points])
        cols = torch.tensor([c for _, _, c in points])
        got = rng.uniform(seed, rows, cols)
        want = [philox_uniform(seed, r, c) for r, c in zip(rows.tolist(), cols.tolist(), strict=True)]
        assert got.tolist() == want


def test_uniform_range_and_resolution():
    u = rng.uniform(7, torch.arange(300)[:, None], torch.arange(200)[None, :])
    assert u.min().item() >= 0.0 and u.max().item() < 1.0
    assert torch.equal(u * 2**16, torch.floor(u * 2**16))           # multiples of 2**-16
    assert len(torch.unique(u)) > 20000                              # and not fewer bits than that
    n = u.numel()
    assert abs(u.double().mean().item() - 0.5) < 5 * math.sqrt(1 / 12 / n)
    # roughly uniform histogram over 10 bins
    hist = torch.histc(u, bins=10, min=0.0, max=1.0)
    assert (hist - n / 10).abs().max().item() < 5 * math.sqrt(n / 10)


def test_uniform_seed_is_taken_mod_2_32_and_rows_cols_broadcast():
    rows, cols = torch.arange(5)[:, None], torch.arange(4)[None, :]
    assert torch.equal(rng.uniform(2**32 + 5, rows, cols), rng.uniform(5, rows, cols))
    assert torch.equal(rng.uniform(-1, rows, cols), rng.uniform(2**32 - 1, rows, cols))
    assert rng.uniform(3, torch.tensor(2), torch.arange(6)).shape == (6,)
    assert not torch.equal(rng.uniform(3, rows, cols), rng.uniform(4, rows, cols))
    assert not torch.equal(rng.uniform(3, rows, cols), rng.uniform(3, cols.t(), rows.t()).t())


def test_dropout_mask_is_uniform_at_least_p():
    m, n, p, seed = 11, 13, 0.37, 99
    mask = rng.dropout_mask(seed, p, m, n)
    assert mask.dtype == torch.bool and mask.shape == (m, n)
    for i in range(m):
        for j in range(n):
            assert bool(mask[i, j]) == (philox_uniform(seed, i, j) >= torch.tensor(p).item())
    assert rng.dropout_mask(seed, 0.0, m, n).all()
    assert not rng.dropout_mask(seed, 1.0, m, n).any()


def test_dropout_mask_is_independent_of_the_domain_size():
    big = rng.dropout_mask(5, 0.5, 64, 70)
    assert torch.equal(big[:9, :31], rng.dropout_mask(5, 0.5, 9, 31))
    assert torch.equal(big[:1, :1], rng.dropout_mask(5, 0.5, 1, 1))


@pytest.mark.parametrize("seed", [0, 5, 2**31 - 1, 2**31, 2**32 - 1, 2**40 + 3, None])
def test_seed_word_is_an_int32_with_the_same_key_bits(seed):
    from coda.runtime.rng import seed_word, uniform

    word = seed_word(seed)
    assert -(2**31) <= word < 2**31
    assert word & 0xFFFFFFFF == (seed or 0) & 0xFFFFFFFF
    rows, cols = torch.arange(3)[:, None], torch.arange(8)[None, :]
    assert torch.equal(uniform(word, rows, cols), uniform(seed or 0, rows, cols))
