"""The GPU accuracy criterion, shared by tests/gpu: CODA's error against a float64 reference must
be at most twice eager PyTorch's error at the same dtype. Every comparison is recorded, and
`tests/gpu/conftest.py` writes the records to $CODA_ACCURACY_JSON (the accuracy table)."""

from __future__ import annotations

import torch

RECORDS: list[dict] = []


def rel(x: torch.Tensor, ref: torch.Tensor) -> float:
    """||x - ref|| / ||ref||, in float64."""
    x, ref = x.double(), ref.double()
    return ((x - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def assert_within_eager(name: str, coda: torch.Tensor, eager: torch.Tensor, exact: torch.Tensor,
                        factor: float = 2.0, floor: float = 1e-6) -> None:
    """Record and check: rel(coda, exact) <= factor * rel(eager, exact) + floor."""
    assert torch.isfinite(coda.double()).all(), f"{name}: non-finite values"
    err, err_eager = rel(coda, exact), rel(eager, exact)
    RECORDS.append(dict(name=name, dtype=str(coda.dtype), coda=err, eager=err_eager,
                        ratio=err / max(err_eager, 1e-30)))
    assert err <= factor * err_eager + floor, f"{name}: error {err:.3e} vs eager {err_eager:.3e}"
