"""coda.ops inside torch.compile: the custom ops of coda.integrations.compile.

For each op: Dynamo reports no graph break, `torch.compile(fullgraph=True)` (aot_eager backend)
runs forward and backward, and outputs and gradients equal the eager op's (float64, reference
backend; the compiled graph launches the same programs, so they are compared exactly). Also: a
small block compiled whole, on float32 through the Triton interpreter and once with Inductor;
dropout seeds drawn inside the graph; `torch.library.opcheck` on every custom op; FakeTensors.
"""

from __future__ import annotations

import copy
import importlib

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import coda
import coda.integrations.compile as cc
from coda import LaunchError, ops
from coda.nn import layer_norm, rms_norm
from coda.ops.common import weight_grad

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


@pytest.mark.parametrize("stats", [None, "rms", "layer"])
def test_mlp_post_norm(stats):
    """A post-norm block's MLP (BERT's): the residual is x itself, with the next norm's sums."""
    torch.manual_seed(0)
    args = (rand(3, 4, 8), rand(12, 8), rand(12), rand(8, 12), rand(8))
    assert_compiles(lambda x, w1, b1, w2, b2: ops.mlp(x, w1, b1, w2, b2, "gelu_erf", 0.2, residual=x,
                                                      stats=stats), *args)


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


@pytest.mark.parametrize("sumsq", [False, True])
def test_qkv_rope_with_the_norm_folded_in(sumsq):
    """norm_weight: in the graph the norm-folded GEMM (coda::rms_norm_linear) and the rotation
    (coda::rope), the same math as the eager op's one fused GEMM; x passed through."""
    torch.manual_seed(0)
    x, g, w = rand(2, 5, 8), (torch.rand(8, dtype=F64) + 0.5).requires_grad_(), rand(16, 8)
    angles = torch.randn(5, 2, dtype=F64)
    ss = x.detach().square().sum(-1) if sumsq else None

    def qkv(x, g, w):
        q, k, v, x = ops.qkv_rope(x, w, angles.cos(), angles.sin(), 2, 1, 4, norm_weight=g, sumsq=ss,
                                  passthrough=True)
        return q, k, v, x * 3.0

    assert_compiles(qkv, x, g, w)


def test_rope():
    torch.manual_seed(0)
    angles = torch.randn(5, 2, dtype=F64)
    assert_compiles(lambda x: ops.rope(x, angles.cos(), angles.sin(), 4, 8), rand(2, 5, 12))


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
    ("none", {"chunk_size": 8, "low_memory": True})])
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


@pytest.mark.parametrize(("bias", "sums", "dtype"), [(False, False, F64), (True, True, F64),
                                                     (True, False, torch.float32)])
def test_rms_norm_linear(bias, sums, dtype):
    """float32: the Triton kernels (interpreter), where without sums the op is rms_norm, then linear."""
    torch.manual_seed(0)
    x, g, w = rand(2, 5, 8), (torch.rand(8, dtype=F64) + 0.5).requires_grad_(), rand(6, 8)
    x, g, w = (t.detach().to(dtype).requires_grad_() for t in (x, g, w))

    def fn(x, g, w, b=None):   # given sums are those of this x, not differentiated
        sumsq = (x.detach() ** 2).sum(-1) if sums else None
        return ops.rms_norm_linear(x, g, w, eps=1e-5, bias=b, sumsq=sumsq)

    b = rand(6).detach().to(dtype).requires_grad_()
    assert_compiles(fn, *((x, g, w, b) if bias else (x, g, w)))


@pytest.mark.parametrize(("bias", "sums"), [(False, False), (True, True)])
def test_layer_norm_linear(bias, sums):
    torch.manual_seed(0)
    x, w = (torch.randn(2, 5, 8, dtype=F64) + 3.0).requires_grad_(), rand(6, 8)
    g, beta = (torch.rand(8, dtype=F64) + 0.5).requires_grad_(), rand(8)

    def fn(x, g, beta, w, b=None):
        rowsum, sumsq = (x.detach().sum(-1), (x.detach() ** 2).sum(-1)) if sums else (None, None)
        return ops.layer_norm_linear(x, g, beta, w, bias=b, eps=1e-5, rowsum=rowsum, sumsq=sumsq)

    assert_compiles(fn, *((x, g, beta, w, rand(6)) if bias else (x, g, beta, w)))


@pytest.mark.parametrize(("stats", "bias", "p", "seed"), [
    (None, False, 0.0, None), ("rms", True, 0.0, None), ("layer", True, 0.3, None),
    ("rms", False, 0.3, 4321)])
def test_out_proj_residual(stats, bias, p, seed):
    torch.manual_seed(0)
    x, w, residual = rand(2, 5, 8), rand(6, 8), rand(2, 5, 6)

    def fn(x, w, r, b=None):
        return ops.out_proj_residual(x, w, r, bias=b, dropout_p=p, seed=seed, stats=stats)

    assert_compiles(fn, *((x, w, residual, rand(6)) if bias else (x, w, residual)))


def test_rms_rstd():
    """rms_rstd on out_proj_residual's ss, as the LLaMA patch uses it: d rstd reaches h."""
    torch.manual_seed(0)

    def fn(x, w, r):
        h, ss = ops.out_proj_residual(x, w, r, stats="rms")
        return h, ops.rms_rstd(h, ss, 1e-6)

    assert_compiles(fn, rand(2, 5, 8), rand(6, 8), rand(2, 5, 6))


@pytest.mark.parametrize("sums", [False, True])
def test_layer_norm(sums):
    """coda.nn.layer_norm alone, and on out_proj_residual's sums (the BERT / GPT-2 patches)."""
    torch.manual_seed(0)
    g, beta = (torch.rand(6, dtype=F64) + 0.5).requires_grad_(), rand(6)
    if sums:
        def fn(x, w, r, g, beta):
            h, ss, s = ops.out_proj_residual(x, w, r, stats="layer")
            return layer_norm(h, g, beta, 1e-5, rowsum=s, sumsq=ss)

        assert_compiles(fn, rand(2, 5, 8), rand(6, 8), rand(2, 5, 6), g, beta)
    else:
        x = (torch.randn(2, 5, 6, dtype=F64) + 3.0).requires_grad_()   # |mean| > std: the shifted sums
        assert_compiles(lambda x, g, beta: layer_norm(x, g, beta, 1e-5), x, g, beta)


@pytest.mark.parametrize("sums", [False, True])
def test_rms_norm(sums):
    """coda.nn.rms_norm alone, and on out_proj_residual's sums of squares."""
    torch.manual_seed(0)
    g = (torch.rand(6, dtype=F64) + 0.5).requires_grad_()
    if sums:
        def fn(x, w, r, g):
            h, ss = ops.out_proj_residual(x, w, r, stats="rms")
            return rms_norm(h, g, 1e-6, sumsq=ss)

        assert_compiles(fn, rand(2, 5, 8), rand(6, 8), rand(2, 5, 6), g)
    else:
        assert_compiles(lambda x, g: rms_norm(x, g, 1e-6), rand(2, 5, 6), g)


@pytest.mark.parametrize("dtype", [F64, torch.float32])
def test_norm_chain(dtype):
    """The norm ops chained as the LLaMA and GPT-2 patches chain them (given sums, dropout with
    drawn seeds) in one graph; float32 runs the real kernels through the Triton interpreter."""
    def fn(x, w_o, r, g, beta, w_qkv, w_o2):
        h, ss = ops.out_proj_residual(x, w_o, r, dropout_p=0.1, stats="rms")
        q = ops.rms_norm_linear(h, g, w_qkv, sumsq=ss) * ops.rms_rstd(h, ss, 1e-6)[..., None]
        h2, ss2, s2 = ops.out_proj_residual(q, w_o2, h, bias=beta, dropout_p=0.1, stats="layer")
        y = layer_norm(h2, g, beta, 1e-5, rowsum=s2, sumsq=ss2)
        return ops.layer_norm_linear(y, g, beta, w_qkv)

    torch.manual_seed(0)
    shapes = [(2, 4, 8), (8, 8), (2, 4, 8), (8,), (8,), (8, 8), (8, 8)]
    assert_compiles(fn, *[(torch.randn(shape, dtype=dtype) / 2 + 0.5 * (len(shape) == 1)).requires_grad_()
                          for shape in shapes])


def test_norms_note_column_sums_only_outside_custom_ops(monkeypatch):
    """LayerNorm's one-pass backward (float32, the interpreter) notes dx's column sums for the
    out projection before it when autograd runs it, and not inside the custom ops of a compiled
    graph (which may reuse a buffer under the same tensor object); both give eager PyTorch's
    unfused outputs and gradients (float32, to a few ulps of their sums)."""
    layer_norm_module = importlib.import_module("coda.nn.layer_norm")   # coda.nn.layer_norm: a function
    notes = []
    original = layer_norm_module.note_column_sums
    monkeypatch.setattr(layer_norm_module, "note_column_sums", lambda *a: notes.append(1) or original(*a))

    def fn(x, w_o, r, b, g, beta):
        h, ss, s = ops.out_proj_residual(x, w_o, r, bias=b, stats="layer")
        return layer_norm(h, g, beta, 1e-5, rowsum=s, sumsq=ss)

    def unfused(x, w_o, r, b, g, beta):
        return torch.nn.functional.layer_norm(r + x @ w_o.T + b, (8,), g, beta, 1e-5)

    torch.manual_seed(0)
    args = [torch.randn(shape).requires_grad_() for shape in ((2, 4, 8), (8, 8), (2, 4, 8), (8,), (8,), (8,))]
    want = run(unfused, [a.detach().clone().requires_grad_() for a in args])   # eager float32
    for counted, fused in ((1, fn), (0, torch.compile(fn, backend="aot_eager", fullgraph=True))):
        notes.clear()
        got = run(fused, args)
        assert len(notes) == counted
        for a, b in zip([*got[0], *got[1]], [*want[0], *want[1]], strict=True):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


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


def assert_inductor_matches_eager(fn, args) -> None:
    """fn compiled by Inductor (the default backend) gives eager's outputs and gradients."""
    expected = run(fn, args)
    # Inductor's on-disk caches key on the graph, not on the fake kernels' code: compile afresh.
    with torch._inductor.config.patch(fx_graph_cache=False), \
            torch._functorch.config.patch(enable_autograd_cache=False):
        got = run(torch.compile(fn, fullgraph=True), args)
    for a, b in zip([*got[0], *got[1]], [*expected[0], *expected[1]], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_block_inductor():
    """The default backend: Inductor compiles the glue around the custom ops; it draws the dropout
    seed with its own RNG, so results match eager only without dropout."""
    def fn(x, w_in, w1, b1, w2, b2, w_head, target):
        h = ops.linear(x, w_in, activation="silu")
        return ops.linear_cross_entropy(ops.mlp(h, w1, b1, w2, b2, residual=h), w_head, target)

    args = block_args(F64)
    assert_inductor_matches_eager(fn, args)


def test_fake_kernels_give_inductor_explicit_fallbacks(monkeypatch):
    """Running any coda op's fake kernel (as Dynamo does on meeting it) registers every coda op
    with Inductor, so Inductor never takes its implicit-fallback path for them."""
    from torch._inductor import lowering

    coda_ops = [getattr(torch.ops.coda, name.split("::")[1]).default for name in cc.OP_NAMES]
    for op in coda_ops:   # as in a fresh process (restored afterwards)
        monkeypatch.delitem(lowering.lowerings, op, raising=False)
    cc.inductor_fallbacks.cache_clear()
    assert len(coda_ops) == 27 and not any(op in lowering.lowerings for op in coda_ops)
    with FakeTensorMode(), cc.custom_ops():
        ops.linear(torch.randn(4, 8), torch.randn(6, 8), activation="gelu")
    assert all(op in lowering.lowerings for op in coda_ops)


def test_a_pytorch_without_those_internals_keeps_the_implicit_path(monkeypatch):
    """Where Inductor lacks make_fallback (its internals change between releases) the fake
    kernels still run and register nothing."""
    from torch._inductor import lowering

    monkeypatch.delattr(lowering, "make_fallback")
    cc.inductor_fallbacks.cache_clear()
    with FakeTensorMode(), cc.custom_ops():
        y = ops.linear(torch.randn(4, 8), torch.randn(6, 8), activation="gelu")
    assert y.shape == (4, 6)
    cc.inductor_fallbacks.cache_clear()   # the next compile registers them


def test_inductor_formats_no_implicit_fallback_message_for_coda_ops(monkeypatch, caplog):
    """PyTorch up to 2.11 formats the implicit-fallback message eagerly, printing the IR of every
    argument (for a patched BERT on the GPU: minutes, never finishing); with INFO logged, later
    versions format it too. No coda op may reach that message."""
    import logging

    from torch._inductor import exc

    printed = []
    original = exc.OperatorIssue.operator_str
    monkeypatch.setattr(exc.OperatorIssue, "operator_str", staticmethod(
        lambda target, args, kwargs: printed.append(str(target)) or original(target, args, kwargs)))
    caplog.set_level(logging.INFO, logger="torch._inductor.graph")

    def fn(x, w_in, w1, b1, w2, b2):
        h = ops.linear(x, w_in, activation="silu")
        return ops.mlp(h, w1, b1, w2, b2, residual=h)

    args = block_args(F64)[:6]
    assert_inductor_matches_eager(fn, args)
    assert not [target for target in printed if "coda" in target]


def test_transposed_weights_inductor():
    """HF's Conv1D layout ([in, out] weights passed as `w.T`): the backward ops hand Inductor the
    contiguous gradients their fakes declare (eager autograd gets them transposed, uncopied)."""
    def fn(x, w1, b1, w2, b2):
        h = ops.mlp(x, w1.T, b1, w2.T, b2, residual=x)
        return ops.out_proj_residual(h, w2.T @ w1.T, h, stats="rms")[0]

    args = (rand(3, 4, 8), rand(8, 12), rand(12), rand(12, 8), rand(8))
    assert_inductor_matches_eager(fn, args)


def test_weight_grad_into_a_wider_buffer_compiles_without_a_break():
    """`weight_grad(dy, x, into=)` with a float32 buffer and float16 activations (its CODA
    ACCUMULATE launch, which Dynamo cannot trace) takes torch's ops under torch.compile: one
    graph, the float64 sum within float32's rounding."""
    g = torch.Generator().manual_seed(2)
    dy, x = torch.randn(40, 6, generator=g).half(), torch.randn(40, 5, generator=g).half()
    acc = torch.randn(6, 5, generator=g)

    def step(dy, x, acc):
        return weight_grad(dy, x, into=acc.clone())

    explained = torch._dynamo.explain(step)(dy, x, acc)
    assert explained.graph_break_count == 0 and explained.graph_count == 1, explained.break_reasons
    got = torch.compile(step, backend="aot_eager", fullgraph=True)(dy, x, acc)
    want = acc.double() + dy.double().T @ x.double()
    assert got.dtype == torch.float32
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)


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


def test_fake_tensors_norms():
    with FakeTensorMode(), cc.custom_ops():
        x, w, g = torch.empty(2, 5, 8), torch.empty(8, 8), torch.empty(8)
        h, ss, s = ops.out_proj_residual(x, w, x, stats="layer")
        y = layer_norm(h, g, g, 1e-5, rowsum=s, sumsq=ss)
        z = ops.layer_norm_linear(y, g, g, torch.empty(12, 8))
        rstd = ops.rms_rstd(h, ss, 1e-6)
        q = ops.rms_norm_linear(h, g, torch.empty(4, 8), sumsq=ss)
    assert (h.shape, ss.shape, s.shape, y.shape) == ((2, 5, 8), (2, 5), (2, 5), (2, 5, 8))
    assert (z.shape, rstd.shape, q.shape) == ((2, 5, 12), (2, 5), (2, 5, 4))
    assert ss.dtype == torch.float32


# patched HuggingFace models, compiled whole --------------------------------------------------------
@pytest.mark.parametrize(("family", "train", "backend"), [
    ("llama", False, "aot_eager"), ("gpt2", False, "aot_eager"), ("bert", False, "aot_eager"),
    ("gpt2", True, "aot_eager"), ("bert", True, "aot_eager"), ("gpt2", False, "inductor")])
def test_patched_hf_model_compiles(family, train, backend, monkeypatch):
    """coda.patch then torch.compile(fullgraph=True): one graph, forward and backward, and the loss
    and every parameter gradient equal the patched eager model's (bit for bit with aot_eager,
    hidden dropout included in training mode; to float64 rounding with Inductor, which compiles
    HF's glue its own way). Compiled, a block's row sums do not travel with its output to the
    next norm (Dynamo keeps no tensor attribute): each norm sums its input in a map, which the
    eager model is made to do as well here."""
    pytest.importorskip("transformers")
    import test_hf as hf  # the tiny random configurations

    from coda.integrations import hf as patching
    monkeypatch.setattr(patching, "_carried_sums", lambda x, module: (None, None))

    ref = {"llama": hf.tiny_llama, "gpt2": hf.tiny_gpt2, "bert": hf.tiny_bert}[family](F64)
    ref.train(train)
    eager = coda.patch(ref)
    compiled_model = copy.deepcopy(eager)
    ids, labels = hf.batch()

    def step(model):
        torch.manual_seed(3)
        loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
        return loss.detach(), [p.grad for p in model.parameters()]

    explained = torch._dynamo.explain(compiled_model)(input_ids=ids, labels=labels)
    assert explained.graph_break_count == 0, explained.break_reasons
    expected = step(eager)
    with torch._inductor.config.patch(fx_graph_cache=False), \
            torch._functorch.config.patch(enable_autograd_cache=False):
        got = step(torch.compile(compiled_model, backend=backend, fullgraph=True))
    names = [name for name, _ in eager.named_parameters()]
    for name, a, b in zip(["loss", *names], [got[0], *got[1]], [expected[0], *expected[1]], strict=True):
        assert (a is None) == (b is None), name
        if a is None:
            continue
        if backend == "aot_eager":
            assert torch.equal(a, b), (name, (a - b).abs().max())
        else:
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12, msg=name)


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
    h5 = rand(3, 5)
    ss5, s5 = (h5.detach() ** 2).sum(-1), h5.detach().sum(-1)
    return {
        "rms_norm_linear": (c.rms_norm_linear, (x, g, w, b, None, 1e-6)),
        "rms_norm_linear_sums": (c.rms_norm_linear, (x, g, w, None, (x.detach() ** 2).sum(-1), 1e-6)),
        "rms_norm_linear_backward": (c.rms_norm_linear_backward, (
            dy, x.detach(), g.detach(), w.detach(), vec + 8.0, 1e-6, [True, True, True, True], F64)),
        "layer_norm_linear": (c.layer_norm_linear, (x, g, rand(8), w, b, 1e-5, None, None)),
        "layer_norm_linear_sums": (c.layer_norm_linear, (x, g, rand(8), w, None, 1e-5,
                                                         x.detach().sum(-1), (x.detach() ** 2).sum(-1))),
        "layer_norm_linear_backward": (c.layer_norm_linear_backward, (
            dy, x.detach(), g.detach(), torch.rand(8, dtype=F64), w.detach(), vec, vec + 8.0, 1e-5, False,
            [True, True, True, True, False], F64)),
        "out_proj_residual": (c.out_proj_residual, (x, w[:5, :8], h5, None, 0.2, seed, "layer")),
        "out_proj_residual_rms": (c.out_proj_residual, (x, w[:5, :8].detach().requires_grad_(), h5, b[:5],
                                                        0.0, None, "rms")),
        "out_proj_residual_backward": (c.out_proj_residual_backward, (
            dy[:, :5], x.detach(), w[:5].detach(), 0.2, seed, [True, True, True], F64)),
        "rms_rstd": (c.rms_rstd, (h5, ss5, 1e-6)),
        "rms_rstd_backward": (c.rms_rstd_backward, (vec, h5.detach(), ss5, 1e-6)),
        "layer_norm": (c.layer_norm, (h5, rand(5), rand(5), 1e-5, None, None)),
        "layer_norm_sums": (c.layer_norm, (h5, rand(5), rand(5), 1e-5, s5, ss5)),
        "layer_norm_backward": (c.layer_norm_backward, (
            dy[:, :5], h5.detach(), torch.rand(5, dtype=F64), s5, ss5, 1e-5, False, [True, True, True],
            F64)),
        "rms_norm": (c.rms_norm, (h5, rand(5), 1e-6, None)),
        "rms_norm_sums": (c.rms_norm, (h5, rand(5), 1e-6, ss5)),
        "rms_norm_backward": (c.rms_norm_backward, (dy[:, :5], h5.detach(), torch.rand(5, dtype=F64),
                                                    ss5, 1e-6, [True, True])),
        "linear": (c.linear, (x, w, b, "gelu", 0.2, seed, True)),
        "linear_backward": (c.linear_backward, (dy, x.detach(), w.detach(), pre, "gelu", 0.2, seed,
                                                [True, True, True], F64)),
        "mlp": (c.mlp, (x, w, b, w2, None, "silu", 0.3, seed, rand(3, 4), True, None, False)),
        "mlp_backward": (c.mlp_backward, (dy[:, :4], x.detach(), w.detach(), w2.detach(), pre, h,
                                          "silu", 0.0, None, [True, True, True, True, False], F64,
                                          None, False)),
        # a post-norm block: the residual x itself (its gradient in dx's) and the norm's sums
        "mlp_post_norm": (c.mlp, (x, w, b, rand(8, 6), None, "gelu", 0.0, None, x, True, "layer", True)),
        "mlp_post_norm_backward": (c.mlp_backward, (dy[:, :1].expand(3, 8).contiguous(), x.detach(),
                                                    w.detach(), rand(8, 6).detach(), pre, h, "gelu",
                                                    0.2, seed, [True, True, True, True, True], F64, F64,
                                                    True)),
        "dropout": (c.dropout, (x, 0.4, seed)),
        "gated_mlp": (c.gated_mlp, (x, wgu, wd, rand(3, 5), rstd, "silu", True, True, None, 1e-6, False)),
        "gated_mlp_backward": (c.gated_mlp_backward, (
            dy[:, :5], vec, x.detach(), wgu.detach(), wd.detach(), rstd.detach(), None, gate, up, h,
            dy[:, :5] + 1, "gelu", [True, True, True, True, True], F64, 1e-6, False)),
        # the norm's own (sumsq) and the residual x itself: its gradient in dx's
        "gated_mlp_sumsq": (c.gated_mlp, (x, wgu, rand(8, 6), x, None, "silu", False, True,
                                          x.detach().square().sum(-1), 1e-5, True)),
        "gated_mlp_sumsq_backward": (c.gated_mlp_backward, (
            dy[:, :1].expand(3, 8).contiguous(), None, x.detach(), wgu.detach(), rand(8, 6).detach(),
            None, vec + 8.0, gate, up, h, None, "silu", [True, True, True, False, False], F64, 1e-5,
            True)),
        "interleave_gain": (c.interleave_gain, (rand(6, 8), rand(6, 8), g)),
        "interleave_gain_backward": (c.interleave_gain_backward, (
            torch.randn(12, 8, dtype=F64), rand(6, 8).detach(), rand(6, 8).detach(), g.detach())),
        "qkv_rope": (c.qkv_rope, (x, wqkv, rand(16), angles.cos(), angles.sin(), 2, 1, 4)),
        "qkv_rope_backward": (c.qkv_rope_backward, (dy[:, :1].expand(3, 16).contiguous(), x.detach(),
                                                    wqkv.detach(), angles.cos(), angles.sin(), 2, 1, 4,
                                                    [True, False, True], F64)),
        "rope": (c.rope, (dy[:, :1].expand(3, 16).contiguous().requires_grad_(), angles.cos(),
                          angles.sin(), 8)),
        "linear_cross_entropy": (c.linear_cross_entropy, (x, w, target, b, g, -100, "mean", 0.1, 3.0,
                                                          4, False, 1e-6)),
        "linear_cross_entropy_with_grads": (c.linear_cross_entropy_with_grads, (
            x, w, target, b, g, -100, "sum", 0.1, 3.0, 4, 1e-6, [True, True, True, True], False, False)),
        "linear_cross_entropy_with_grads_skipping": (c.linear_cross_entropy_with_grads, (
            x, w, target, b, g, -100, "mean", 0.1, 3.0, 4, 1e-6, [True, True, True, True], True, False)),
        "linear_cross_entropy_with_grads_exponential": (c.linear_cross_entropy_with_grads, (
            x, w, target, None, None, -100, "mean", 0.0, None, 4, 1e-6, [True, True, False, False], False,
            True)),
        # a transposed weight (HF's Conv1D layout): its gradient contiguous, as the fake declares it
        "linear_cross_entropy_with_grads_transposed_w": (c.linear_cross_entropy_with_grads, (
            x, rand(8, 6).T, target, b, None, -100, "mean", 0.0, None, 4, 1e-6, [True, True, True, False],
            False, False)),
        # 16-bit x, dw and db not asked for: their empty placeholders in x's dtype, fake and real
        "linear_cross_entropy_with_grads_bfloat16": (c.linear_cross_entropy_with_grads, (
            x.detach().bfloat16().requires_grad_(), w.detach().bfloat16(), target, None, None, -100, "mean",
            0.0, None, 4, 1e-6, [True, False, False, False], False, False)),
        # 16-bit x: the sums left out are empty tensors of the sums' dtype, as the fakes declare them
        "mlp_bfloat16": (c.mlp, (x.bfloat16(), w.bfloat16(), b.bfloat16(), w2.bfloat16(), None, "gelu", 0.0,
                                 None, None, True, None, False)),
        "out_proj_residual_float16_rms": (c.out_proj_residual, (x.half(), w[:5, :8].half(), h5.half(), None,
                                                                0.0, None, "rms")),
        "linear_cross_entropy_backward": (c.linear_cross_entropy_backward, (
            torch.tensor(0.5, dtype=F64), x.detach(), w.detach(), None, None, torch.empty(0, dtype=F64),
            tf, vec + 2.0, torch.empty(0, dtype=F64), vec, 0.0, None, 4, True, [True, True, False, False])),
    }


@pytest.mark.parametrize("name", sorted(opcheck_cases()))
def test_opcheck(name):
    op, args = opcheck_cases()[name]
    torch.library.opcheck(op, args)


def test_vmap_over_the_custom_ops_is_refused():
    """Under vmap a batched tensor reads requires_grad=False, so the custom op's forward kept
    nothing for the backward, which failed inside CODA ("operand 'slope' ... got shape [0]"):
    the ops refuse vmap, as their autograd.Functions do (an audit's find)."""
    w = torch.randn(6, 8, dtype=F64)
    x = torch.randn(3, 4, 8, dtype=F64, requires_grad=True)
    with pytest.raises(coda.CodaError, match=r"coda::linear does not run under torch\.func\.vmap"):
        torch.func.vmap(lambda rows: cc.linear(rows, w, activation="gelu"))(x)
    compiled = torch.compile(torch.func.vmap(lambda rows: ops.linear(rows, w, activation="gelu")),
                             backend="aot_eager", fullgraph=True)
    with pytest.raises(RuntimeError, match=r"does not run under torch\.func\.vmap"):   # Dynamo's wrapper
        compiled(x)
