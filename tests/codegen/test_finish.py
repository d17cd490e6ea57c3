"""Finishing cross-tile reductions (codegen/finish.py) against torch in float64, through the
Triton interpreter on the CPU: the log-sum-exp merge of (maximum, sum) partials, including columns
whose partials are all -inf, a NaN, and partial counts of 1 and not a multiple of anything."""

from __future__ import annotations

import math

import pytest
import torch

from coda.codegen.finish import finish


def partials(parts: int, n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(maxima, sums) as a tile's epilogue writes them: m_p the maximum of its values, s_p the sum
    of e^(x - m_p) over them (so s_p >= 1)."""
    g = torch.Generator().manual_seed(seed)
    maxima = torch.randn(parts, n, generator=g) * 30
    sums = 1 + torch.rand(parts, n, generator=g) * 100
    return maxima, sums


def reference(maxima: torch.Tensor, sums: torch.Tensor) -> torch.Tensor:
    return torch.logsumexp(maxima.double() + sums.double().log(), 0)


# partial counts of 1, below, at and over one step of the merge (128) and not a multiple of it;
# column counts not a multiple of the block (16 columns a step at 128 partials, 512 at 4)
@pytest.mark.parametrize(("parts", "n"), [(1, 5), (3, 519), (37, 300), (128, 33), (1571, 40)])
def test_logsumexp_merge_matches_float64(parts, n):
    maxima, sums = partials(parts, n, seed=parts)
    out = torch.full((n,), float("nan"))   # poisoned: every column must be written
    finish("row_logsumexp", (maxima, sums), out)
    torch.testing.assert_close(out.double(), reference(maxima, sums), rtol=1e-6, atol=1e-5)


def test_minus_infinity_and_nan_columns():
    maxima, sums = partials(4, 6, seed=1)
    maxima[:, 0] = -math.inf           # every partial empty: -inf, as torch.logsumexp gives
    maxima[2, 1] = -math.inf           # one empty partial among finite ones: ignored
    sums[2, 1] = 0.0
    maxima[1, 2] = math.nan            # NaN propagates
    out = torch.full((6,), 7.0)
    finish("row_logsumexp", (maxima, sums), out)
    want = reference(maxima, sums)
    assert out[0].item() == -math.inf and want[0].item() == -math.inf
    assert math.isnan(out[2].item()) and math.isnan(want[2].item())
    keep = [1, 3, 4, 5]
    torch.testing.assert_close(out[keep].double(), want[keep], rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize(("reduction", "op"), [("row_sum", torch.sum), ("col_max", torch.amax)])
def test_sums_and_maxima(reduction, op):
    maxima, _ = partials(9, 13, seed=3)
    out = torch.full((13,), float("nan"))
    finish(reduction, (maxima,), out)
    torch.testing.assert_close(out, op(maxima, 0))


COMPILE_SM90 = """
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from coda.codegen.finish import _logsumexp_merge, merge_tile
signature = {"max_ptr": "*fp32", "sum_ptr": "*fp32", "out_ptr": "*fp32", "parts": "i32", "n": "i32",
             "BLOCK_P": "constexpr", "BLOCK_N": "constexpr"}
ok = True
for parts in (24, 1571):
    block_p, block_n = merge_tile(parts)
    source = ASTSource(_logsumexp_merge, signature, constexprs={"BLOCK_P": block_p, "BLOCK_N": block_n})
    ptx = triton.compile(source, target=GPUTarget("cuda", 90, 32)).asm["ptx"]
    ok = ok and "ex2.approx" in ptx and "st.global" in ptx
print(ok)
"""


def test_logsumexp_merge_compiles_for_sm90():
    """The interpreter is not the GPU compiler: the merge kernel must also compile for sm_90
    (in a subprocess: the test session's Triton runs in interpreter mode, fixed at import)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("triton.backends.nvidia", reason="this Triton has no NVIDIA backend")
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, TRITON_INTERPRET="0", PYTHONPATH=str(root / "src"))
    done = subprocess.run([sys.executable, "-c", COMPILE_SM90], env=env, capture_output=True,
                          text=True, timeout=300, cwd=root)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "True"
