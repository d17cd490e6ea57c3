"""coda.ops inside torch.compile: the custom ops of coda.integrations.compile.

For each op: Dynamo reports no graph break, `torch.compile(fullgraph=True)` (aot_eager backend)
runs forward and backward, and outputs and gradients equal the eager op's (float64, reference
backend; the compiled graph launches the same programs, so they are compared exactly). Also: a
small block compiled whole, on float32 through the Triton interpreter and once with Inductor;
dropout seeds drawn inside the graph; `torch.library.opcheck` on every custom op; FakeTensors.
"""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import coda.integrations.compile as cc
from coda import LaunchError, ops

F64 = torch.float64


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Each test traces its own closures: no recompile limits or cached graphs across tests."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def rand(*shape: int, dtype: torch.dtype = F64, grad: bool = True) -> torch.Tensor:
    return torch.randn(*shape, dtype=dtype).requires_grad_(grad)


def run(fn, args, seed: int = 7):
    """fn's outputs and the gradients of a fixed random projection of them (same RNG state on
    every call: dropout with seed=None draws the same seeds in eager and aot_eager graphs)."""
    for a in args:
        a.grad = None
    torch.manual_seed(seed)
    out = fn(*args)
    outs = out if isinstance(out, tuple) else (out,)
    gen = torch.Generator().manual_seed(0)
    loss = sum((o * torch.randn(o.shape, generator=gen, dtype=o.dtype)).sum() for o in outs)
    loss.backward()
    return [o.detach() for o in outs], [a.grad for a in args if a.requires_grad]


def assert_compiles(fn, *args, backend: str = "aot_eager"):
    """No graph break; compiled (fullgraph) outputs and gradients equal eager's, and so do those of
    the custom ops in eager mode (coda.integrations.compile)."""
    explained = torch._dynamo.explain(fn)(*args)
    assert explained.graph_break_count == 0, explained.break_reasons
    assert explained.graph_count == 1
    expected = run(fn, args)
    with cc.custom_ops():
        eager_custom = run(fn, args)
    compiled = run(torch.compile(fn, backend=backend, fullgraph=True), args)
    for got in (eager_custom, compiled):
        for a, b in zip([*got[0], *got[1]], [*expected[0], *expected[1]], strict=True):
            assert a.shape == b.shape and a.dtype == b.dtype
            assert torch.equal(a, b), (a - b).abs().max()


# one case per op and variant ---------------------------------------------------------------------
@pytest.mark.parametrize(("activation", "bias", "p", "seed"), [
    (None, False, 0.0, None), ("gelu", True, 0.0, None), ("silu", True, 0.25, None),
    ("relu", False, 0.25, 1234)])
def test_linear(activation, bias, p, seed):
    torch.manual_seed(0)
    x, w = rand(2, 5, 8), rand(6, 8)
    args = (x, w, rand(6)) if bias else (x, w)
    assert_compiles(lambda x, w, b=None: ops.linear(x, w, b, activation, p, seed), *args)


@pytest.mark.parametrize(("activation", "p", "residual"), [("gelu", 0.0, False), ("silu", 0.3, True),
                                                             (None, 0.0, True)])
def test_mlp(activation, p, residual):
    torch.manual_seed(0)
    args = (rand(3, 4, 8), rand(12, 8), rand(12), rand(6, 12), rand(6))
    if residual:
        assert_compiles(lambda x, w1, b1, w2, b2, r: ops.mlp(x, w1, b1, w2, b2, activation, p,
                                                              residual=r), *args, rand(3, 4, 6))
    else:
        assert_compiles(lambda *a: ops.mlp(*a, activation=activation, dropout_p=p), *args)


@pytest.mark.parametrize("seed", [None, 99])
def test_dropout(seed):
    torch.manual_seed(0)
    assert_compiles(lambda x: ops.dropout(x * 2.0, 0.4, seed), rand(3, 7, 9))


@pytest.mark.parametrize(("fn", "extras"), [(ops.swiglu_mlp, True), (ops.geglu_mlp, False)])
def test_gated_mlp(fn, extras):
    torch.manual_seed(0)
    x, w_gate_up, w_down = rand(2, 3, 8), rand(2 * 10, 8), rand(6, 10)
    if extras:   # residual and the folded norm's rstd, both with gradients, and ss = sum(y * y)
        rstd = (torch.rand(2, 3, dtype=F64) + 0.5).requires_grad_()
        assert_compiles(lambda *a: fn(*a, stats=True), x, w_gate_up, w_down, rand(2, 3, 6), rstd)
    else:
        assert_compiles(fn, x, w_gate_up, w_down)


@pytest.mark.parametrize("bias", [False, True])
def test_qkv_rope(bias):
    torch.manual_seed(0)
    n_heads, n_kv_heads, head_dim = 4, 2, 4
    x, w = rand(2, 5, 8), rand((n_heads + 2 * n_kv_heads) * head_dim, 8)
    angles = torch.randn(5, head_dim // 2, dtype=F64)
    cos, sin = angles.cos(), angles.sin()

    def qkv(x, w, b=None):
        return ops.qkv_rope(x, w, cos, sin, n_heads, n_kv_heads, head_dim, bias=b)

    assert_compiles(qkv, *((x, w, rand(w.shape[0])) if bias else (x, w)))


def test_qkv_rope_views():
    """q, k and v are views of one buffer in the graph too, and an unused v gives no error."""
    torch.manual_seed(0)
    x, w = rand(5, 8), rand(16, 8)
    cos, sin = torch.ones(5, 2, dtype=F64), torch.zeros(5, 2, dtype=F64)
    q, k, v = torch.compile(lambda x, w: ops.qkv_rope(x, w, cos, sin, 2, 1, 4), backend="aot_eager",
                            fullgraph=True)(x, w)
    assert q.shape == (5, 2, 4) and k.shape == v.shape == (5, 1, 4)
    assert q.untyped_storage().data_ptr() == v.untyped_storage().data_ptr()
    (q.sum() + k.sum()).backward()
    torch.testing.assert_close(x.grad, w[:12].sum(0).expand(5, 8).detach())   # no rotation: dq = dk = 1


@pytest.mark.parametrize(("reduction", "options"), [
    ("mean", {}),
    ("sum", {"label_smoothing": 0.1, "softcap": 5.0, "chunk_size": 7}),
    ("none", {"chunk_size": 8})])
def test_linear_cross_entropy(reduction, options):
    torch.manual_seed(0)
    x, w = rand(3, 4, 8), rand(20, 8)
    target = torch.randint(20, (3, 4))
    target[0, 1] = -100
    if reduction == "none":   # with the bias and the folded RMSNorm
        args = (x, w, rand(20), (torch.rand(8, dtype=F64) + 0.5).requires_grad_())

        def fn(x, w, b, g):
            return ops.linear_cross_entropy(x, w, target, b, reduction="none", norm_weight=g,
                                            **options)
    else:
        args = (x, w)

        def fn(x, w):
            return ops.linear_cross_entropy(x, w, target, reduction=reduction, **options)
    assert_compiles(fn, *args)


# a block, seeds, the default backend -------------------------------------------------------------
def block(x, w_in, w1, b1, w2, b2, w_head, target):
    h = ops.linear(x, w_in, activation="silu")
    h = ops.mlp(h, w1, b1, w2, b2, activation="gelu", dropout_p=0.1, residual=h)
    return ops.linear_cross_entropy(h, w_head, target)


def block_args(dtype: torch.dtype) -> tuple:
    torch.manual_seed(0)
    shapes_scales = [((2, 8, 16), 1), ((24, 16), 4), ((40, 24), 5), ((40,), 1), ((24, 40), 6), ((24,), 1),
                     ((33, 24), 5)]
    return (*[(torch.randn(shape, dtype=dtype) / scale).requires_grad_() for shape, scale in shapes_scales],
            torch.randint(33, (2, 8)))


@pytest.mark.parametrize("dtype", [F64, torch.float32])
def test_block(dtype):
    """linear -> mlp (dropout, residual) -> linear_cross_entropy as one graph; float32 runs the
    real kernels through the Triton interpreter."""
    assert_compiles(block, *block_args(dtype))


def test_every_op_one_graph_dynamic_shapes():
    """All seven ops in one function: one graph, reused across sequence lengths (dynamic=True)."""
    def fn(x, w_in, w_qkv, w_gate_up, w_down, w1, b1, w2, b2, w_head, target, cos, sin):
        h = ops.linear(x, w_in, activation="silu")
        q, _, v = ops.qkv_rope(h, w_qkv, cos, sin, 2, 1, 4)
        h = ops.dropout(h + q.sum((-2, -1))[..., None] * v.sum((-2, -1))[..., None], 0.1)
        h = ops.geglu_mlp(h, w_gate_up, w_down, residual=h)
        h = ops.mlp(h, w1, b1, w2, b2, activation="gelu", dropout_p=0.1, residual=h)
        return ops.linear_cross_entropy(h, w_head, target)

    def args(seq: int) -> tuple:
        torch.manual_seed(seq)
        shapes = [(2, seq, 16), (24, 16), (16, 24), (20, 24), (24, 10), (40, 24), (40,), (24, 40), (24,),
                  (33, 24)]
        return (*[(torch.randn(shape, dtype=F64) / 4).requires_grad_() for shape in shapes],
                torch.randint(33, (2, seq)), torch.randn(seq, 2, dtype=F64), torch.randn(seq, 2, dtype=F64))

    torch._dynamo.utils.counters.clear()
    compiled = torch.compile(fn, backend="aot_eager", fullgraph=True, dynamic=True)
    for seq in (5, 7):
        a = args(seq)
        expected, got = run(fn, a), run(compiled, a)
        for x, y in zip([*got[0], *got[1]], [*expected[0], *expected[1]], strict=True):
            assert torch.equal(x, y)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1


def test_block_inductor():
    """The default backend: Inductor compiles the glue around the custom ops; it draws the dropout
    seed with its own RNG, so results match eager only without dropout."""
    def fn(x, w_in, w1, b1, w2, b2, w_head, target):
        h = ops.linear(x, w_in, activation="silu")
        return ops.linear_cross_entropy(ops.mlp(h, w1, b1, w2, b2, residual=h), w_head, target)

    args = block_args(F64)
    expected = run(fn, args)
    # Inductor's on-disk caches key on the graph, not on the fake kernels' code: compile afresh.
    with torch._inductor.config.patch(fx_graph_cache=False), \
            torch._functorch.config.patch(enable_autograd_cache=False):
        got = run(torch.compile(fn, fullgraph=True), args)
    for a, b in zip([*got[0], *got[1]], [*expected[0], *expected[1]], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_dropout_seed_drawn_per_run():
    """seed=None is drawn inside the graph at each run (not baked in at trace time), from torch's
    generator; the backward reuses the forward's mask."""
    fn = torch.compile(lambda x: ops.linear(x, w, dropout_p=0.5), backend="aot_eager", fullgraph=True)
    x, w = rand(6, 8), rand(8, 8, grad=False)
    torch.manual_seed(1)
    y1 = fn(x)
    y2 = fn(x)
    assert not torch.equal(y1 == 0, y2 == 0)
    torch.manual_seed(1)
    assert torch.equal(fn(x), y1)
    y1.backward(torch.ones_like(y1))
    assert torch.equal(x.grad, ((y1 != 0).to(F64) * 2.0) @ w)   # the same mask, scaled by 1/(1-p)


def test_int_seeds():
    """A new int seed recompiles once (then the seed is dynamic); any int keys eager's mask."""
    fn = torch.compile(lambda x, seed: ops.dropout(x, 0.5, seed), backend="aot_eager", fullgraph=True)
    x = torch.randn(4, 16, dtype=F64)
    for seed in (1, 2, 3, -7, 2**70 + 3):
        assert torch.equal(fn(x, seed), ops.dropout(x, 0.5, seed))


def test_errors_still_raised_when_compiling():
    with pytest.raises(LaunchError, match="w is"):
        torch.compile(lambda x, w: ops.linear(x, w), backend="aot_eager")(rand(2, 8), rand(3, 7))


def test_fake_tensors():
    """Inside custom_ops() a model runs on FakeTensors (shape propagation without kernels)."""
    with FakeTensorMode(), cc.custom_ops():
        x, w = torch.empty(2, 5, 8), torch.empty(12, 8)
        y = cc.linear(x, w, activation="gelu", dropout_p=0.1)
        h = ops.mlp(y, torch.empty(16, 12), None, torch.empty(12, 16), None, residual=y)
        loss = ops.linear_cross_entropy(h, torch.empty(7, 12), torch.zeros(2, 5, dtype=torch.long),
                                        reduction="none")
    assert y.shape == (2, 5, 12) and loss.shape == (2, 5)


# torch.library.opcheck: schemas, fake kernels, autograd registrations ---------------------------
def opcheck_cases():
    torch.manual_seed(0)
    x, w, b = rand(3, 8), rand(6, 8), rand(6)
    seed = torch.tensor(5)
    dy = torch.randn(3, 6, dtype=F64)
    pre = torch.randn(3, 6, dtype=F64)
    w2, h = rand(4, 6), torch.randn(3, 6, dtype=F64)
    rstd = (torch.rand(3, dtype=F64) + 0.5).requires_grad_()
    wgu, wd = rand(12, 8), rand(5, 6)
    gate = up = torch.randn(3, 6, dtype=F64)
    angles = torch.randn(3, 2, dtype=F64)
    wqkv = rand(16, 8)
    target, tf = torch.tensor([1, -100, 5]), torch.tensor([1.0, -1.0, 5.0], dtype=F64)
    g = (torch.rand(8, dtype=F64) + 0.5).requires_grad_()
    vec = torch.rand(3, dtype=F64)
    c = torch.ops.coda
    return {
        "linear": (c.linear, (x, w, b, "gelu", 0.2, seed, True)),
        "linear_backward": (c.linear_backward, (dy, x.detach(), w.detach(), pre, "gelu", 0.2, seed,
                                                [True, True, True], F64)),
        "mlp": (c.mlp, (x, w, b, w2, None, "silu", 0.3, seed, rand(3, 4), True)),
        "mlp_backward": (c.mlp_backward, (dy[:, :4], x.detach(), w.detach(), w2.detach(), pre, h,
                                          "silu", 0.0, None, [True, True, True, True, False], F64,
                                          None)),
        "dropout": (c.dropout, (x, 0.4, seed)),
        "gated_mlp": (c.gated_mlp, (x, wgu, wd, rand(3, 5), rstd, "silu", True, True)),
        "gated_mlp_backward": (c.gated_mlp_backward, (
            dy[:, :5], vec, x.detach(), wgu.detach(), wd.detach(), rstd.detach(), gate, up, h,
            dy[:, :5] + 1, "gelu", [True, True, True, True, True], F64)),
        "qkv_rope": (c.qkv_rope, (x, wqkv, rand(16), angles.cos(), angles.sin(), 2, 1, 4)),
        "qkv_rope_backward": (c.qkv_rope_backward, (dy[:, :1].expand(3, 16).contiguous(), x.detach(),
                                                    wqkv.detach(), angles.cos(), angles.sin(), 2, 1, 4,
                                                    [True, False, True], F64)),
        "linear_cross_entropy": (c.linear_cross_entropy, (x, w, target, b, g, -100, "mean", 0.1, 3.0,
                                                          4, 1e-6)),
        "linear_cross_entropy_backward": (c.linear_cross_entropy_backward, (
            torch.tensor(0.5, dtype=F64), x.detach(), w.detach(), None, None, torch.empty(0, dtype=F64),
            tf, vec + 2.0, torch.empty(0, dtype=F64), vec, 0.0, None, 4, [True, True, False, False])),
    }


@pytest.mark.parametrize("name", sorted(opcheck_cases()))
def test_opcheck(name):
    op, args = opcheck_cases()[name]
    torch.library.opcheck(op, args)
