"""benchmarks/gemm.py's back-to-back pairing: a clock that sinks steadily while GEMMs run must not
count against the kernel timed second (the fused one, in a fixed order)."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("rounds", [1, 4, 5])
def test_a_steady_drift_cancels(monkeypatch, gemm, rounds):
    calls = []

    def bench(fn, warmup=0, rep=0):   # each timing 3% slower than the one before it
        calls.append(fn)
        return fn() * (1 + 0.03 * len(calls))
    monkeypatch.setattr(gemm, "bench", bench)

    def plain():
        return 1.0

    def fused():
        return 1.1
    assert gemm.paired_ratios(plain, plain, rounds) == pytest.approx([1.0] * rounds)
    assert gemm.paired_ratios(fused, plain, rounds) == pytest.approx([1.1] * rounds)
    assert len(calls) == 8 * rounds
