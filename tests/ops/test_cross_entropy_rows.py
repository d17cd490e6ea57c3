"""coda.ops.cross_entropy_rows' kernels (the exponential path's per-row steps) through the Triton
interpreter in float32, against the same steps in PyTorch (`exp_headroom`, `exp_patch` on the
reference backend, float64), on fresh random rows: some past the headroom (counted or not), rows
that do not count (α = 0), a block limit, targets ignored (-1) and outside [0, V). Outputs are poisoned (NaN)
before the kernels write them."""

from __future__ import annotations

import pytest
import torch

from coda.ops.cross_entropy import EXP_HEADROOM, exp_headroom, exp_patch

F64 = torch.float64


def rows_case(rows: int, vocab: int, over: bool, seed: int):
    g = torch.Generator().manual_seed(seed)
    reference = torch.randn(rows, generator=g) * 3
    se = torch.rand(rows, generator=g) * 200 + 1
    if over:   # a counted row 85 past its reference: ΣE = e^85 (float32's largest is e^88.7)
        se[rows // 2] = torch.tensor(85.0).exp()
    alpha = torch.where(torch.rand(rows, generator=g) < 0.8, 1.0 / rows, 0.0)
    alpha[rows // 2] = 1.0 / rows
    target = torch.randint(0, vocab, (rows,), generator=g).float()
    target[::7], target[3] = -1.0, vocab + 2.0
    lse = reference + se.log()   # a row's target logit t is at most its lse
    t = lse - torch.rand(rows, generator=g) * 6
    lse_again = lse + torch.rand(rows, generator=g) * 1e-3
    e = torch.rand(rows, vocab, generator=g)
    return reference, se, alpha, target, t, lse_again, e


def poison(monkeypatch):
    """The kernels' outputs (allocated by `torch.empty` / `torch.empty_like`) start as NaN, -1."""
    empty_like, empty = torch.empty_like, torch.empty
    monkeypatch.setattr(torch, "empty_like", lambda t, **k: empty_like(t, **k).fill_(float("nan")))
    monkeypatch.setattr(torch, "empty", lambda *a, **k: empty(*a, **k).fill_(-1))


@pytest.mark.parametrize("over", ["none", "counted", "ignored"])
@pytest.mark.parametrize(("rows", "limit"), [(37, None), (2500, None), (2500, 1900), (50, 0)])
def test_kernels_match_pytorch(monkeypatch, rows, limit, over):
    """A row past the headroom makes the block run again whether it counts or not (an ignored
    row's overflowing E would make its zero share NaN), unless it lies past the limit (not
    computed)."""
    poison(monkeypatch)
    case = rows_case(rows, 29, over != "none", seed=rows + len(over))
    reference, se, alpha, target, t, lse_again, e = case
    if over == "ignored":
        alpha[rows // 2] = 0.0
    limit_t = None if limit is None else torch.tensor([limit], dtype=torch.int32)
    if limit is not None:   # the rows past the limit count for nothing
        alpha[limit:] = 0.0
    want_lse, want_redo = exp_headroom(reference.to(F64), se.to(F64), limit_t)
    got_lse, got_redo = exp_headroom(reference, se, limit_t)
    assert got_redo.dtype == torch.int32 and got_redo.tolist() == want_redo.tolist()
    counted = alpha > 0
    assert (want_redo.item() > 0) == (over != "none" and (limit is None or rows // 2 < limit))
    torch.testing.assert_close(got_lse.to(F64), want_lse, rtol=1e-6, atol=1e-5)

    want_e, got_e = e.to(F64), e.clone()
    want = exp_patch(reference.to(F64), want_lse, lse_again.to(F64), want_redo, t.to(F64),
                     target.to(F64), alpha.to(F64), want_e)
    got = exp_patch(reference, got_lse.clone(), lse_again, got_redo, t, target, alpha, got_e)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g[counted].to(F64), w[counted], rtol=1e-5, atol=1e-6)
    assert (got[1][~counted] == 0).all()
    # the target's element: terms up to ΣE (~200) times e^(float32's rounding of lse, |lse| < 20);
    # past the headroom exp(lse - c) ~ e^85 is off by the roundings of lse = c + log ΣE near 95
    # (2^-18 each, three of them: about 1.1e-5 relative)
    torch.testing.assert_close(got_e.to(F64), want_e, rtol=2e-5, atol=200 * 20 * 2**-23)
    assert EXP_HEADROOM < 85


def test_patch_writes_only_the_targets_element(monkeypatch):
    poison(monkeypatch)
    """Every element of E but each row's target stays as it was (bit for bit)."""
    reference, se, alpha, target, t, lse_again, e = rows_case(300, 41, False, seed=3)
    lse, redo = exp_headroom(reference, se, None)
    patched = e.clone()
    exp_patch(reference, lse, lse_again, redo, t, target, alpha, patched)
    inside = (target >= 0) & (target < 41)
    keep = torch.ones_like(e, dtype=torch.bool)
    keep[torch.arange(300)[inside], target[inside].long()] = False
    assert torch.equal(patched[keep], e[keep])
    assert not torch.equal(patched[~keep], e[~keep])
