"""Host cost of LayerNorm -> linear's forward on the CPU, piece by piece: the kernels run once in
the Triton interpreter, then every plan's launcher is replaced by a no-op, so what is timed is
CODA's Python and PyTorch's allocations and autograd (best of 9 rounds, microseconds).

    TRITON_INTERPRET=1 PYTHONPATH=src python benchmarks/results/session13/host_fwd13.py
"""
import gc
import os
import time

os.environ["TRITON_INTERPRET"] = "1"
import torch

from coda import ops
from coda.integrations import compile as custom
from coda.ops import checks
from coda.ops import norms as N
from coda.ops.common import as_rows
from coda.runtime.program import Program


class Trivial(torch.autograd.Function):
    """An autograd.Function with as many arguments, saving as much, doing nothing."""

    @staticmethod
    def forward(ctx, x, g, beta, w, b, eps, r, s, p):
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(x, g, beta, w)
        ctx.eps = eps
        return x.view_as(x)

    @staticmethod
    def backward(ctx, dy):
        return (dy,) + (None,) * 8


def noop(*args) -> None:
    return None


def bench(f, n: int = 500) -> float:
    best = 1e9
    for _ in range(9):
        t0 = time.perf_counter()
        for _ in range(n):
            f()
        best = min(best, (time.perf_counter() - t0) / n)
    return best * 1e6


torch.manual_seed(0)
t, h = 64, 32
shapes = ((t, h), (h,), (h,), (3 * h, h), (3 * h,))
x, g, beta, w, b = (torch.randn(*shape).requires_grad_() for shape in shapes)
ops.layer_norm_linear(x, g, beta, w, b, 1e-5).sum().backward()
for o in gc.get_objects():
    if isinstance(o, Program):
        for plan in o._plans.values():
            plan.launcher = noop
            if plan.finisher is not None:
                plan.finisher.launcher = noop
rows = x.detach()
shift = N.row_shift(rows, True)
stats = N.LN_STATS.map(rows, shift=shift, outputs=["s", "ss"])
fold = N.FOLD_LN.map(w.detach(), g=g.detach(), beta=beta.detach())
folded = fold["output"]
u = N.SUMS.map(folded, outputs=["rows"])["rows"]
row = dict(shift=shift, s=stats["s"], ss=stats["ss"], inv_n=1.0 / h, eps=1e-5)


def the_checks() -> None:
    N._check_linear("l", x, w)
    checks.vector("l", "g", g, h, x)
    checks.vector("l", "beta", beta, h, x)
    N._check_bias("l", b, 3 * h, x)
    checks.row_stats("l", x, t, rowsum=None, sumsq=None)


for name, f in [
    ("x.sum(0)", lambda: x.sum(0)),
    ("whole op fwd", lambda: ops.layer_norm_linear(x, g, beta, w, b, 1e-5)),
    ("Function.apply path",
     lambda: N.LayerNormLinearFunction.apply(x, g, beta, w, b, 1e-5, None, None, False)),
    ("trivial Function.apply", lambda: Trivial.apply(x, g, beta, w, b, 1e-5, None, None, False)),
    ("as_rows", lambda: as_rows(x)),
    ("row_shift", lambda: N.row_shift(rows, True)),
    ("LN_STATS", lambda: N.LN_STATS.map(rows, shift=shift, outputs=["s", "ss"])),
    ("FOLD_LN", lambda: N.FOLD_LN.map(w, g=g, beta=beta)),
    ("SUMS", lambda: N.SUMS.map(folded, outputs=["rows"])),
    ("LN_LINEAR", lambda: N.LN_LINEAR[True](rows, folded.T, **row, u=u, cv=fold["cv"], bias=b)),
    ("checks", the_checks),
    ("custom.routed()", custom.routed),
    ("checks.eps", lambda: checks.eps("l", 1e-5)),
]:
    print(f"{name:22s} {bench(f):7.1f} us")
