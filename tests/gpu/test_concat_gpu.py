"""GPU checks of coda.Concat and `split=`: bf16 at GPT-2's q/k/v shapes, through both Hopper
kernels (the Triton one's and the Gluon ping-pong one's TMA descriptors of the pieces).

The GEMMs a q/k/v gradient feeds (dx = (dq | dk | dv) @ w along K, dw = (dq | dk | dv).T @ x
along M), and layer_norm_linear with split=, against float64 of the same bf16 inputs:
CODA's error at most twice eager PyTorch's in bf16 (tests/gpu/accuracy.py). Outputs are poisoned
(NaN) before the kernels write them.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from accuracy import assert_within_eager

import coda
from coda.codegen.tuning import Config
from coda.ops.common import PLAIN
from coda.ops.norms import LN_DXHAT, layer_norm_linear

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

BF16 = torch.bfloat16
#: None: the heuristic's configuration (the Triton kernel at these K); the ping-pong kernel's
MAINLOOPS = {"heuristic": None, "pingpong": Config(128, 128, 64, 4, 4, split_epilogue=2, pingpong=True)}


def randn(*shape, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(*shape, generator=g, device="cuda").to(BF16)


@pytest.mark.parametrize("mainloop", MAINLOOPS)
@pytest.mark.parametrize("tokens, width", [(16384, 768), (4096, 1024), (1000, 200)])
def test_concat_gemms_bf16(tokens, width, mainloop):
    """Along K pieces of 768, 1024 and 200 columns (a piece's last K block ragged: zero past its
    end); along M whole row blocks (1000 and 200 rows are not: those pieces are joined)."""
    blocks = [randn(tokens, width, seed=i) for i in range(3)]
    w, x = randn(3 * width, width, seed=5) * 0.05, randn(tokens, width, seed=6)
    whole = torch.cat(blocks, 1)
    cat = coda.Concat(blocks, 1)
    for name, a, b, exact_a in (("dx (along K)", cat, w, whole), ("dw (along M)", cat.T, x, whole.T)):
        out = torch.full((a.shape[0], b.shape[1]), float("nan"), device="cuda", dtype=BF16)
        PLAIN.triton.launch(PLAIN.bind(a, b, out=out), MAINLOOPS[mainloop])
        exact = exact_a.double() @ b.double()
        assert_within_eager(f"concat {name} {tokens}x{width} {mainloop}", out, exact_a @ b, exact)


@pytest.mark.parametrize("mainloop", MAINLOOPS)
def test_concat_of_other_layouts_bf16(mainloop):
    """Pieces stored transposed, joined along K (A's K not contiguous: ragged widths 512, 256,
    320), and row pieces joined along M (K contiguous; 512 and 256 rows, whole row blocks, then
    300), each against float64 of the joined A."""
    along_k = [randn(k, 4096, seed=30 + i).T for i, k in enumerate((512, 256, 320))]
    along_m = [randn(m, 1024, seed=40 + i) for i, m in enumerate((512, 256, 300))]
    for name, pieces, dim in (("transposed pieces along K", along_k, 1), ("rows along M", along_m, 0)):
        cat, whole = coda.Concat(pieces, dim), torch.cat(pieces, dim)
        b = randn(whole.shape[1], 512, seed=50) * whole.shape[1] ** -0.5
        out = torch.full((whole.shape[0], 512), float("nan"), device="cuda", dtype=BF16)
        PLAIN.triton.launch(PLAIN.bind(cat, b, out=out), MAINLOOPS[mainloop])
        assert_within_eager(f"concat {name} {mainloop}", out, whole @ b, whole.double() @ b.double())


@pytest.mark.parametrize("mainloop", MAINLOOPS)
def test_concat_with_a_tile_operand_and_row_sums_bf16(mainloop):
    """LayerNorm's dxhat GEMM as GPT-2 runs it: the q/k/v gradients in place (along K), a tile
    operand staged by TMA, two row sums; against the same epilogue on the joined A in float64."""
    tokens, width = 16384, 768
    blocks = [randn(tokens, width, seed=20 + i) for i in range(3)]
    w, xin = randn(3 * width, width, seed=24) * 0.05, randn(tokens, width, seed=25)
    g = 1 + 0.1 * randn(width, seed=26)
    s, ss = xin.float().sum(1), (xin.float() ** 2).sum(1)
    row = dict(shift=torch.zeros(tokens, device="cuda"), s=s, ss=ss, inv_n=1.0 / width, eps=1e-5)
    got = LN_DXHAT.triton.launch(LN_DXHAT.bind(coda.Concat(blocks, 1), w, **row, g=g, xin=xin),
                                 MAINLOOPS[mainloop])
    whole = torch.cat(blocks, 1)
    exact = LN_DXHAT.reference(whole.double(), w.double(), **{k: v.double() if isinstance(v, torch.Tensor)
                                                               else v for k, v in row.items()},
                               g=g.double(), xin=xin.double())
    # eager PyTorch in bf16: dxhat = (dy @ w) * g, a = Σ dxhat, b = Σ dxhat * xhat per row
    mean = s / width
    rstd = torch.rsqrt(ss / width - mean * mean + 1e-5)
    dxhat = (whole @ w) * g
    xhat = (xin - mean[:, None].to(BF16)) * rstd[:, None].to(BF16)
    eager = {"output": dxhat, "a": dxhat.sum(1), "b": (dxhat * xhat).sum(1)}
    for name in ("output", "a", "b"):
        assert_within_eager(f"ln_dxhat on a concat {mainloop}: {name}", got[name], eager[name], exact[name])


@pytest.mark.parametrize("layout", ["linear", "conv1d"])
def test_split_projections_bf16(layout):
    """GPT-2's ln_1 + c_attn: q, k, v as column blocks; the weight in nn.Linear's layout, or
    stored [in, out] and passed transposed as HF's Conv1D does (GPT-2's)."""
    tokens, width = 8192, 768
    x = randn(4, tokens // 4, width, seed=1)
    g, beta = 1 + 0.1 * randn(width, seed=2), 0.1 * randn(width, seed=3)
    w, b = randn(3 * width, width, seed=4) * 0.03, 0.1 * randn(3 * width, seed=5)
    stored, weight = (w.T.contiguous(), lambda t: t.T) if layout == "conv1d" else (w, lambda t: t)
    ups = [randn(4, tokens // 4, width, seed=10 + i) for i in range(3)]

    def grads(fn, dtype):
        leaves = [t.detach().to(dtype).requires_grad_() for t in (x, g, beta, stored, b)]
        outs = fn(*leaves)
        sum((o.to(dtype) * u.to(dtype)).sum() for o, u in zip(outs, ups, strict=True)).backward()
        return [o.detach() for o in outs] + [t.grad for t in leaves]

    def eager(x, g, beta, w, b):
        return F.linear(F.layer_norm(x, (width,), g, beta, 1e-5), weight(w), b).split(width, -1)

    exact, ref = grads(eager, torch.float64), grads(eager, BF16)
    fused = grads(lambda x, g, beta, w, b: layer_norm_linear(x, g, beta, weight(w), b, split=[width] * 3),
                  BF16)
    names = ["q", "k", "v", "dx", "dg", "dbeta", "dw", "db"]
    for name, got, want, truth in zip(names, fused, ref, exact, strict=True):
        assert_within_eager(f"layer_norm_linear split {name}", got, want, truth)


#: every mainloop that sums A's columns: the portable Triton kernel, the persistent one, the
#: ping-pong one
SUM_MAINLOOPS = MAINLOOPS | {"portable": Config(128, 128, 64, 4, 3),
                             "hopper": Config(128, 256, 64, 8, 3, split_epilogue=2)}


@pytest.mark.parametrize("mainloop", SUM_MAINLOOPS)
@pytest.mark.parametrize("case", ["one tensor", "transposed", "concat along K", "concat along M"])
def test_a_col_sums_bf16(case, mainloop):
    """`a_col_sums=True` (a bias gradient from the dx GEMM's K loop) at GPT-2's out-projection
    shape (M = 15999 or 16999: a ragged last row block; along M a first piece of 125 whole ones),
    against float64 of the same bf16 A; eager PyTorch's bf16 column sum is the yardstick
    (tests/gpu/accuracy.py); the GEMM's output is the launch's without the sums (the ping-pong
    kernel's bit for bit, the Triton kernels' within eager's error)."""
    tokens, width = 16000, 768
    pieces = [randn(tokens, width, seed=60 + i) for i in range(3)]
    a = {"one tensor": pieces[0][:15999], "transposed": pieces[0][:15999].T.contiguous().T,
         "concat along K": coda.Concat(pieces, 1),
         "concat along M": coda.Concat((pieces[0], pieces[1][:999]), 0)}[case]
    whole = a.materialize() if isinstance(a, coda.Concat) else a
    b = randn(whole.shape[1], 1024, seed=70) * whole.shape[1] ** -0.5
    plain = PLAIN.triton.launch(PLAIN.bind(a, b), SUM_MAINLOOPS[mainloop])["output"]
    got = PLAIN.triton.launch(PLAIN.bind(a, b, a_col_sums=True, dtypes={"a_col_sums": BF16}),
                              SUM_MAINLOOPS[mainloop])
    if mainloop in ("heuristic", "pingpong"):   # the sums leave the ping-pong kernel's MMAs alone
        assert torch.equal(got["output"], plain)
    else:   # a second reader of the A tile may change the MMA instruction Triton picks
        assert_within_eager(f"a_col_sums {case} {mainloop}: output", got["output"], whole @ b,
                            whole.double() @ b.double())
    assert_within_eager(f"a_col_sums {case} {mainloop}", got["a_col_sums"], whole.sum(0),
                        whole.double().sum(0))
