"""coda.ops.common: the plain GEMM and the weight gradient, also accumulated into a buffer; the
column sums of a Concat; layer_norm_linear's output in column blocks (`split=`), whose gradients
the backward reads in place (a Concat), against float64 autograd of the unsplit formula; column
sums noted by a norm's backward and taken as the bias gradients of the ops before it (a GPT-2
block's chain), and the notes' guards."""

from __future__ import annotations

import importlib
import threading

import pytest
import torch
import torch.nn.functional as F

import coda
from coda.nn.layer_norm import layer_norm, rms_norm
from coda.ops import common, norms
from coda.ops.common import column_sum, known_column_sums, matmul, note_column_sums, weight_grad
from coda.ops.gated_mlp import interleave, swiglu_mlp
from coda.ops.linear import mlp
from coda.ops.norms import layer_norm_linear, out_proj_residual

#: Where the Triton kernels run, which alone note column sums: the GPU, else the interpreter on the
#: CPU. Float32 GEMMs are exact to float32 in the interpreter and take tf32 tensor cores (inputs
#: rounded to 10 mantissa bits, relative error ~1e-3) on the GPU.
TRITON_DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
FLOAT32_RTOL = 1e-4 if TRITON_DEVICE == "cpu" else 4e-3


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_matmul_and_weight_grad_match_float64(dtype):
    torch.manual_seed(0)
    dy, x, w = (torch.randn(*shape).to(dtype) for shape in ((37, 24), (37, 16), (24, 16)))
    tol = 1e-5 if dtype == torch.float32 else 2e-3
    torch.testing.assert_close(matmul(dy, w).double(), dy.double() @ w.double(), rtol=tol, atol=tol * 4)
    torch.testing.assert_close(weight_grad(dy, x).double(), dy.double().T @ x.double(), rtol=tol,
                               atol=tol * 4)


@pytest.mark.parametrize("into_dtype", [torch.float16, torch.float32])
def test_weight_grad_accumulates_into_a_buffer(into_dtype):
    """`into` of the activations' dtype (cuBLAS, beta = 1) or float32 (a CODA `output +=` GEMM)."""
    torch.manual_seed(1)
    dy, x = torch.randn(40, 24).half(), torch.randn(40, 16).half()
    start = torch.randn(24, 16).to(into_dtype)
    into = start.clone()
    got = weight_grad(dy, x, into=into)
    assert got.data_ptr() == into.data_ptr() and got.dtype == into_dtype
    exact = start.double() + dy.double().T @ x.double()
    tol = 2e-3 if into_dtype == torch.float16 else 1e-5
    torch.testing.assert_close(into.double(), exact, rtol=tol, atol=tol * 8)


def test_weight_grad_takes_a_transposed_weights_layout():
    """HF's Conv1D weights are [in, out], passed as `weight.T`: their gradient comes back as a
    transposed view whose transpose (what autograd hands the parameter) is contiguous, so no
    copy follows; an nn.Linear weight keeps a contiguous [out, in] gradient."""
    g = torch.Generator().manual_seed(4)
    dy, x = torch.randn(64, 24, generator=g), torch.randn(64, 40, generator=g)
    conv1d = torch.randn(40, 24, generator=g)   # [in, out]
    got = weight_grad(dy, x, like=conv1d.T)
    assert got.shape == (24, 40) and got.T.is_contiguous()
    torch.testing.assert_close(got.double(), dy.double().T @ x.double(), rtol=1e-5, atol=1e-4)
    assert weight_grad(dy, x, like=conv1d.T.contiguous()).is_contiguous()
    param = torch.nn.Parameter(conv1d.clone())
    from coda.ops import linear
    linear(x, param.T).backward(dy)
    torch.testing.assert_close(param.grad.double(), x.double().T @ dy.double(), rtol=1e-5, atol=1e-4)


def _weights(seed, shapes):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, generator=g, dtype=torch.float64) for s in shapes]


def _grads_of(fn, tensors, upstream):
    """The outputs' weighted sum's gradients: some blocks weighted, one unused (None)."""
    leaves = [t.detach().clone().requires_grad_() for t in tensors]
    outs = fn(*leaves)
    loss = sum((o * u).sum() for o, u in zip(outs, upstream, strict=False) if u is not None)
    loss.backward()
    return [o.detach() for o in outs], [t.grad for t in leaves]


@pytest.mark.parametrize("passthrough", [False, True])
def test_layer_norm_linear_split_blocks_and_gradients(passthrough):
    x, g, beta, w, b = _weights(3, [(40, 32), (32,), (32,), (96, 32), (96,)])
    widths = [32, 32, 32]
    gen = torch.Generator().manual_seed(4)
    upstream = [torch.randn(40, 32, generator=gen, dtype=torch.float64) for _ in widths]
    upstream += [torch.randn(40, 32, generator=gen, dtype=torch.float64)] if passthrough else []

    def fused(*t):
        outs = layer_norm_linear(*(u.float() for u in t), passthrough=passthrough, split=widths)
        return [o.float() for o in outs]

    def eager(x, g, beta, w, b):
        blocks = F.linear(F.layer_norm(x, (32,), g, beta, 1e-5), w, b).split(widths, -1)
        return [*blocks, x] if passthrough else blocks

    outs, grads = _grads_of(fused, (x, g, beta, w, b), upstream)
    want_outs, want = _grads_of(eager, (x, g, beta, w, b), upstream)
    for got, exact in zip([*outs, *grads], [*want_outs, *want], strict=True):
        torch.testing.assert_close(got.double(), exact, rtol=1e-4, atol=2e-4)


def test_column_sum_of_a_concat():
    g = torch.Generator().manual_seed(6)
    blocks = [torch.randn(48, w, generator=g) for w in (16, 16, 32)]
    exact = torch.cat(blocks, 1).double().sum(0)
    torch.testing.assert_close(column_sum(coda.Concat(blocks, 1)).double(), exact, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("split, message", [
    ([8, 9], "adding up to N = 16"),
    ([8, 0, 8], "positive column widths"),
    (8, "list of positive"),
])
def test_split_errors(split, message):
    x, g, beta, w = torch.randn(4, 12), torch.ones(12), torch.zeros(12), torch.randn(16, 12)
    with pytest.raises(coda.LaunchError, match=message):
        layer_norm_linear(x, g, beta, w, split=split)


def _taken_sums(monkeypatch) -> list:
    """What each op before a norm (coda.ops.linear's, coda.ops.norms') gets from
    known_column_sums while the test runs, in order: the sums, or None."""
    taken = []

    def spy(t, dtype):
        taken.append(common.known_column_sums(t, dtype))
        return taken[-1]

    for module in (importlib.import_module("coda.ops.linear"), norms):   # coda.ops.linear: a function
        monkeypatch.setattr(module, "known_column_sums", spy)
    return taken


def test_norms_give_their_dx_column_sums_to_the_ops_before_them(monkeypatch):
    """A GPT-2 block's chain on the Triton kernels (float32, TRITON_DEVICE): out projection +
    residual -> LayerNorm (passed through) -> MLP + residual -> the next block's LayerNorm-folded
    q/k/v. Each norm's one-pass backward sums the columns of the dx it writes; the MLP's fc2 and
    the out projection take their bias gradients from those sums (no column sums in their GEMMs),
    and every gradient is float64 autograd's of the unfused formula."""
    c, m = 32, 40
    shapes = [(m, c), (c, c), (c,), (m, c), (c,), (c,), (4 * c, c), (4 * c,), (c, 4 * c), (c,), (c,), (c,),
              (3 * c, c), (3 * c,)]
    tensors = _weights(7, shapes)
    for i in (1, 6, 8, 12):   # weights at 1/sqrt(fan-in): activations of order one throughout
        tensors[i] = tensors[i] / tensors[i].shape[1] ** 0.5
    upstream = [torch.randn(m, 3 * c, generator=torch.Generator().manual_seed(8), dtype=torch.float64)]
    taken = _taken_sums(monkeypatch)

    def fused(a, w_o, b_o, res, g2, beta2, w1, b1, w2, b2, g1, beta1, wq, bq):
        h, ss, s = out_proj_residual(a, w_o, res, bias=b_o, stats="layer")
        xn, h = layer_norm(h, g2, beta2, rowsum=s, sumsq=ss, passthrough=True)
        y, ss, s = mlp(xn, w1, b1, w2, b2, "gelu", residual=h, stats="layer")
        q, y = layer_norm_linear(y, g1, beta1, wq, bq, rowsum=s, sumsq=ss, passthrough=True)
        return [(q + y.repeat(1, 3)).cpu()]

    def eager(a, w_o, b_o, res, g2, beta2, w1, b1, w2, b2, g1, beta1, wq, bq):
        h = res + F.linear(a, w_o, b_o)
        y = h + F.linear(F.gelu(F.linear(F.layer_norm(h, (c,), g2, beta2, 1e-5), w1, b1), approximate="tanh"),
                         w2, b2)
        return [F.linear(F.layer_norm(y, (c,), g1, beta1, 1e-5), wq, bq) + y.repeat(1, 3)]

    outs, grads = _grads_of(lambda *t: fused(*(u.float().to(TRITON_DEVICE) for u in t)), tensors, upstream)
    want_outs, want = _grads_of(eager, tensors, upstream)
    for got, exact in zip([*outs, *grads], [*want_outs, *want], strict=True):
        torch.testing.assert_close(got.double(), exact, rtol=FLOAT32_RTOL,
                                   atol=2 * FLOAT32_RTOL * exact.abs().max().item())
    assert len(taken) == 2 and all(t is not None for t in taken)   # fc2's db and the out projection's


def test_a_noted_sum_is_read_once_by_the_tensor_it_was_noted_for():
    """A note answers only for the tensor it names (not a view of it), once, in its own dtype
    only, and not after an in-place change; only the last NOTES_KEPT notes are kept."""
    f32 = torch.float32
    grads = [torch.randn(6, 4) for _ in range(4)]
    for g in grads[:3]:
        note_column_sums(g, g.sum(0))
    assert known_column_sums(grads[1].view(6, 4), f32) is None
    torch.testing.assert_close(known_column_sums(grads[1], f32), grads[1].sum(0))
    assert known_column_sums(grads[1], f32) is None   # read once
    assert known_column_sums(grads[2], torch.float64) is None   # a bias of another dtype sums again
    note_column_sums(grads[0], grads[0].sum(0))
    grads[0].add_(1.0)
    assert known_column_sums(grads[0], f32) is None   # changed in place since
    for g in grads:
        note_column_sums(g, g.sum(0))
    kept = [known_column_sums(g, f32) is not None for g in grads]
    assert kept == [False] * (4 - common.NOTES_KEPT) + [True] * common.NOTES_KEPT


def test_threads_keep_their_own_notes():
    """Autograd runs each device's backward on a thread of its own (several GPUs at once under
    nn.DataParallel): each thread notes and reads its own sums. With one list for all, another
    thread's notes made between a note and its read pushed it out (and a read's delete by index
    could meet a list another thread had trimmed)."""
    mine, theirs = torch.randn(6, 4), [torch.randn(6, 4) for _ in range(common.NOTES_KEPT)]
    noted, read = threading.Event(), threading.Event()
    found = []

    def first() -> None:
        note_column_sums(mine, mine.sum(0))
        noted.set()
        read.wait()
        found.append(known_column_sums(mine, torch.float32))

    def second() -> None:
        noted.wait()
        for g in theirs:
            note_column_sums(g, g.sum(0))
        found.append(known_column_sums(theirs[-1], torch.float32))
        read.set()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    torch.testing.assert_close(found[0], theirs[-1].sum(0))
    torch.testing.assert_close(found[1], mine.sum(0))


def test_a_gradient_that_autograd_adds_to_takes_no_note(monkeypatch):
    """The out projection's output read by the norm and once more: autograd adds the two
    gradients, so the out projection gets another tensor than the one the norm's backward wrote
    (and noted), finds no sums and sums its own (float32, TRITON_DEVICE); its gradients are
    float64 autograd's of the unfused formula."""
    taken = _taken_sums(monkeypatch)
    c = 16
    tensors = _weights(9, [(2, 5, c), (c, c), (2, 5, c), (c,), (c,), (c,)])

    def fused(a, w, r, b, g, beta):
        h, ss, s = out_proj_residual(*(t.float().to(TRITON_DEVICE) for t in (a, w, r, b)), stats="layer")
        g, beta = (t.float().to(TRITON_DEVICE) for t in (g, beta))
        return [(layer_norm(h, g, beta, rowsum=s, sumsq=ss) + h * 2.0).cpu()]

    def eager(a, w, r, b, g, beta):
        h = r + F.linear(a, w, b)
        return [F.layer_norm(h, (c,), g, beta, 1e-5) + h * 2.0]

    upstream = [torch.randn(2, 5, c, generator=torch.Generator().manual_seed(10), dtype=torch.float64)]
    outs, grads = _grads_of(fused, tensors, upstream)
    want_outs, want = _grads_of(eager, tensors, upstream)
    for got, exact in zip([*outs, *grads], [*want_outs, *want], strict=True):
        torch.testing.assert_close(got.double(), exact, rtol=FLOAT32_RTOL,
                                   atol=FLOAT32_RTOL * exact.abs().max().item())
    assert taken == [None]


@pytest.mark.parametrize("op", ["layer_norm", "rms_norm", "layer_norm_linear", "rms_norm_linear"])
def test_a_leafs_gradient_takes_no_note(op):
    """A norm's one-pass backward notes dx's column sums for the op that produced x; a leaf x has
    none, and a note (which holds dx) would make autograd store a copy of dx as x.grad. So a
    leaf's gradient is not noted and x.grad is the kernel's dx; an x made by an op is noted. The
    gradients are float64 autograd's (float32 on TRITON_DEVICE)."""
    c, m = 32, 12
    g, beta, w = _weights(11, [(c,), (c,), (24, c)])
    calls = {"layer_norm": lambda x, g, b, w: layer_norm(x, g, b),
             "rms_norm": lambda x, g, b, w: rms_norm(x, g),
             "layer_norm_linear": lambda x, g, b, w: layer_norm_linear(x, g, b, w / c**0.5, None, 1e-5),
             "rms_norm_linear": lambda x, g, b, w: norms.rms_norm_linear(x, g, w / c**0.5, 1e-6)}
    exact = {"layer_norm": lambda x, g, b, w: F.layer_norm(x, (c,), g, b, 1e-5),
             "rms_norm": lambda x, g, b, w: F.rms_norm(x, (c,), g, 1e-6),
             "layer_norm_linear": lambda x, g, b, w: F.linear(F.layer_norm(x, (c,), g, b, 1e-5), w / c**0.5),
             "rms_norm_linear": lambda x, g, b, w: F.linear(F.rms_norm(x, (c,), g, 1e-6), w / c**0.5)}
    params = [t.float().to(TRITON_DEVICE) for t in (g, beta, w)]
    for leaf in (True, False):
        common.noted_sums().clear()
        x0 = torch.randn(m, c, generator=torch.Generator().manual_seed(12), dtype=torch.float64)
        x = x0.float().to(TRITON_DEVICE).requires_grad_()
        y = calls[op](x if leaf else x * 1.0, *params)
        y.backward(torch.ones_like(y))
        notes = [noted for noted, _, _ in common.noted_sums()]
        assert len(notes) == (0 if leaf else 1), (leaf, len(notes))
        x64 = x0.clone().requires_grad_()
        exact[op](x64, *(t.double() for t in (g, beta, w))).sum().backward()
        torch.testing.assert_close(x.grad.double().cpu(), x64.grad, rtol=FLOAT32_RTOL,
                                   atol=FLOAT32_RTOL * x64.grad.abs().max().item())


def test_ops_follow_autocast():
    """Inside torch.autocast a GEMM op's float32 arguments are cast to the region's dtype (float16
    here, which the interpreter computes right) and its result comes out in it, float32
    parameters get float32 gradients; statistics (`sumsq`) are not cast; a norm runs in float32,
    as autocast runs one. Outside the region nothing changes."""
    torch.manual_seed(0)
    x, w, g = (torch.randn(*shape, requires_grad=True) for shape in ((12, 16), (24, 16), (16,)))
    sumsq = x.detach().square().sum(-1)
    with torch.autocast("cpu", dtype=torch.float16):
        y = norms.rms_norm_linear(x, g, w, 1e-6, sumsq=sumsq)
        z = layer_norm(y, torch.ones(24), torch.zeros(24))
        r = rms_norm(y, torch.ones(24))
        routed = norms.rms_norm_linear(x, g, w, 1e-6)   # no sumsq: rms_norm, then linear
    assert y.dtype == routed.dtype == torch.float16 and z.dtype == r.dtype == torch.float32
    torch.testing.assert_close(routed, y, rtol=2e-3, atol=2e-3)
    (z.sum() + r.sum()).backward()
    assert x.grad.dtype == w.grad.dtype == g.grad.dtype == torch.float32
    x16, w16, g16 = (t.detach().half().double() for t in (x, w, g))
    want = (x16 * torch.rsqrt(x16.square().mean(-1, keepdim=True) + 1e-6) * g16) @ w16.T
    torch.testing.assert_close(y.double(), want, rtol=2e-3, atol=2e-3)
    assert norms.rms_norm_linear(x, g, w, 1e-6).dtype == torch.float32   # no region, no cast


def test_follows_autocast_casts_what_it_should():
    """float32 and the other 16-bit dtype to the region's dtype (torch's F.linear of a float16 x
    in a bfloat16 region is bfloat16: CODA refused the mix), but the kept names; float64 and
    integer tensors and numbers as they are; the op itself runs with autocast off."""
    seen = {}

    @common.follows_autocast("stats")
    def op(x, w, stats=None, ids=None, wide=None, p=0.5):
        seen.update(x=x.dtype, w=w.dtype, stats=stats.dtype, ids=ids.dtype, wide=wide.dtype, p=p,
                    autocast=torch.is_autocast_enabled("cpu"))

    args = (torch.ones(2), torch.ones(2, dtype=torch.float16))
    extra = dict(stats=torch.ones(2), ids=torch.ones(2, dtype=torch.int64),
                 wide=torch.ones(2, dtype=torch.float64))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        op(*args, **extra)
    assert seen == dict(x=torch.bfloat16, w=torch.bfloat16, stats=torch.float32, ids=torch.int64,
                        wide=torch.float64, p=0.5, autocast=False)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.nn.functional.linear(args[1], torch.ones(3, 2)).dtype == torch.bfloat16   # torch's
    op(*args, **extra)
    assert seen["x"] == torch.float32 and seen["autocast"] is False
    with torch.autocast("cpu", dtype=torch.bfloat16):   # tensors passed by keyword only
        op(x=args[0], w=args[1], **extra)
    assert seen["x"] == torch.bfloat16
    with torch.autocast("cpu", dtype=torch.bfloat16):   # a kept one passed by position
        op(*args, extra["stats"], extra["ids"], extra["wide"])
    assert seen["stats"] == torch.float32


def test_an_op_under_autocast_compiles_after_a_dict_changed():
    """torch.compile(fullgraph=True) of an op under autocast, after the traced code changed a dict
    (as a patched GPT-2's forward does, its tied LM head flagging its embedding): the op's
    autocast wrapper binds no `inspect.Signature`, whose mappingproxy Dynamo refuses then."""
    torch.manual_seed(0)
    x, w = torch.randn(4, 16, requires_grad=True), torch.randn(8, 16, requires_grad=True)
    flags = {}

    def step(x):
        flags["seen"] = True
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return coda.ops.linear(x, w, activation="gelu")

    y = torch.compile(step, backend="aot_eager", fullgraph=True)(x)
    assert y.dtype == torch.bfloat16
    torch.testing.assert_close(y, step(x), rtol=0, atol=0)



def _second_derivative_cases() -> dict:
    """name -> a function that runs the op on fresh float64 leaves: (output, [leaves])."""
    from coda import nn as cnn
    from coda import ops

    def leaf(*shape):
        return torch.randn(*shape, dtype=torch.float64).requires_grad_()

    def case(op, *shapes):
        def run():
            leaves = [leaf(*shape) for shape in shapes]
            return op(*leaves), leaves
        return run

    angles = torch.rand(3, 2, dtype=torch.float64)
    cos, sin, ids = angles.cos(), angles.sin(), torch.tensor([1, 4, 9])
    return {
        "linear": case(lambda x, w: ops.linear(x, w, activation="gelu"), (3, 8), (6, 8)),
        "mlp": case(lambda x, w1, w2: ops.mlp(x, w1, None, w2), (3, 8), (6, 8), (8, 6)),
        "dropout": case(lambda x: ops.dropout(x, 0.5, seed=1), (3, 8)),
        "rms_norm_linear": case(ops.rms_norm_linear, (3, 8), (8,), (6, 8)),
        "layer_norm_linear": case(ops.layer_norm_linear, (3, 8), (8,), (8,), (6, 8)),
        "out_proj_residual": case(lambda x, w, r: ops.out_proj_residual(x, w, r)[0], (3, 8), (6, 8), (3, 6)),
        "swiglu_mlp": case(ops.swiglu_mlp, (3, 8), (12, 8), (8, 6)),
        "interleave": case(lambda w, u, g: ops.interleave(w, u, gain=g), (6, 8), (6, 8), (8,)),
        "rope": case(lambda x: ops.rope(x, cos, sin, head_dim=4), (3, 8)),
        "qkv_rope": case(lambda x, w: ops.qkv_rope(x, w, cos, sin, 2, 1, 4)[0], (3, 8), (16, 8)),
        "linear_cross_entropy": case(lambda x, w: ops.linear_cross_entropy(x, w, ids), (3, 8), (10, 8)),
        "embedding": case(lambda w: ops.embedding(ids, w), (10, 8)),
        "rms_rstd": case(lambda h: ops.rms_rstd(h, (h * h).sum(1), 1e-6), (3, 8)),
        "layer_norm": case(cnn.layer_norm, (3, 8), (8,), (8,)),
        "rms_norm": case(cnn.rms_norm, (3, 8), (8,)),
    }


@pytest.mark.parametrize("custom_ops", [False, True], ids=["functions", "custom_ops"])
@pytest.mark.parametrize("name", sorted(_second_derivative_cases()))
def test_a_second_derivative_is_refused_not_wrong(name, custom_ops):
    """The ops' backward programs have no derivative: asked for a graph of the gradient
    (create_graph=True, a second derivative's first step) they raise, where a graph of their
    eager parts would give a wrong second derivative; through the custom ops too (where
    PyTorch raised its own error at the second backward), but for the embedding, which is
    torch's there (and differentiable twice). A plain backward is unaffected."""
    from coda.integrations import compile as custom

    run = _second_derivative_cases()[name]
    with custom.custom_ops(custom_ops):
        out, leaves = run()
        if custom_ops and name == "embedding":
            torch.autograd.grad(out.square().sum(), leaves, create_graph=True)
        else:
            with pytest.raises(coda.CodaError, match="differentiable once"):
                torch.autograd.grad(out.square().sum(), leaves, create_graph=True)
        out, leaves = run()
        assert all(g is not None for g in torch.autograd.grad(out.square().sum(), leaves))


@pytest.mark.parametrize("name", sorted(_second_derivative_cases()))
def test_an_ops_output_may_be_changed_in_place(name):
    """As with torch's own ops (`nn.ReLU(inplace=True)` after a linear): the output is not a view
    of the op's buffers. Gradients are those of the unchanged output (+1 moves none of them), or,
    where the backward reads the output it saved, autograd's error about the in-place change."""
    run = _second_derivative_cases()[name]
    torch.manual_seed(1)
    out, leaves = run()
    want = torch.autograd.grad(out.sum(), leaves)
    torch.manual_seed(1)
    out, leaves = run()
    out.add_(1.0)
    try:
        got = torch.autograd.grad(out.sum(), leaves)
    except RuntimeError as err:
        assert "modified by an inplace operation" in str(err)
        return
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", ["linear", "mlp", "dropout", "rms_norm_linear", "layer_norm_linear",
                                  "swiglu_mlp", "layer_norm", "rms_norm"])
def test_an_empty_batch_runs_forward_and_backward(name):
    """x [2, 0, 8] (no rows): an empty output of the right shape, and zero gradients for the
    parameters, as torch gives."""
    from coda import nn as cnn
    from coda import ops

    def leaf(*shape):
        return torch.randn(*shape, dtype=torch.float64).requires_grad_()

    x, w, w2, g, b = leaf(2, 0, 8), leaf(6, 8), leaf(8, 6), leaf(8), leaf(8)
    op, params, width = {
        "linear": (lambda: ops.linear(x, w, activation="gelu"), [w], 6),
        "mlp": (lambda: ops.mlp(x, w, None, w2), [w, w2], 8),
        "dropout": (lambda: ops.dropout(x, 0.5, seed=1), [], 8),
        "rms_norm_linear": (lambda: ops.rms_norm_linear(x, g, w), [g, w], 6),
        "layer_norm_linear": (lambda: ops.layer_norm_linear(x, g, b, w), [g, b, w], 6),
        "swiglu_mlp": (lambda: ops.swiglu_mlp(x, leaf(12, 8), w2), [w2], 8),
        "layer_norm": (lambda: cnn.layer_norm(x, g, b), [g, b], 8),
        "rms_norm": (lambda: cnn.rms_norm(x, g), [g], 8),
    }[name]
    out = op()
    assert out.shape == (2, 0, width)
    grads = torch.autograd.grad(out.sum(), [x, *params])
    assert grads[0].shape == x.shape
    for grad, param in zip(grads[1:], params, strict=True):
        assert torch.equal(grad, torch.zeros_like(param))


def test_no_input_features_is_refused_by_name():
    """A layer or a norm over zero features is refused, naming the argument."""
    from coda import nn as cnn
    from coda import ops

    x = torch.randn(3, 0, dtype=torch.float64)
    with pytest.raises(coda.LaunchError, match="w: in_features is 0"):
        ops.linear(x, torch.randn(5, 0, dtype=torch.float64))
    with pytest.raises(coda.LaunchError, match="layer_norm: x has no features to normalize"):
        cnn.layer_norm(x, torch.ones(0, dtype=torch.float64), torch.zeros(0, dtype=torch.float64))
    assert ops.dropout(x, 0.5, seed=1).shape == (3, 0)   # element-wise: nothing to refuse


@pytest.mark.parametrize("eps", ["x", None, -1.0, True])
def test_a_norms_eps_is_checked(eps):
    from coda import nn as cnn

    x = torch.randn(3, 8)
    for norm, params in ((cnn.layer_norm, (torch.ones(8), torch.zeros(8))), (cnn.rms_norm, (torch.ones(8),))):
        with pytest.raises(coda.LaunchError, match="eps must be a number >= 0"):
            norm(x, *params, eps=eps)


def test_rms_rstd_checks_its_arguments():
    from coda import ops

    h = torch.randn(5, 8)
    for args, words in (((h, torch.rand(4), 1e-6), r"ss must have one value per row .* got \[4\]"),
                        ((h.long(), torch.rand(5), 1e-6), "h has dtype torch.int64"),
                        ((h, [1.0] * 5, 1e-6), "ss must be a torch.Tensor"),
                        ((h, torch.rand(5), "x"), "eps must be a number >= 0")):
        with pytest.raises(coda.LaunchError, match=words):
            ops.rms_rstd(*args)
    ss = (h * h).sum(1)
    torch.testing.assert_close(ops.rms_rstd(h, ss, 1e-6), torch.rsqrt(ss / 8 + 1e-6))


def test_sparse_arguments_are_refused_by_name():
    """A sparse x crashed in a reshape ("reshape is not implemented for sparse tensors") before
    any launch's check, and a sparse w without a bias ran through torch.matmul (audit's find)."""
    from coda import nn as cnn
    from coda import ops

    x, w, g = torch.randn(8, 16), torch.randn(12, 16), torch.ones(16)
    calls = {"x": [lambda: ops.linear(x.to_sparse(), w), lambda: ops.dropout(x.to_sparse(), 0.5, seed=0),
                   lambda: ops.swiglu_mlp(x.to_sparse(), torch.randn(24, 16), torch.randn(16, 12)),
                   lambda: cnn.layer_norm(x.to_sparse(), g, g),
                   lambda: ops.linear_cross_entropy(x.to_sparse(), w, torch.zeros(8, dtype=torch.long))],
             "rms_norm_linear: x": [lambda: ops.rms_norm_linear(x.to_sparse(), g, w)],
             "w": [lambda: ops.linear(x, w.to_sparse()),
                   lambda: ops.linear(x, w.to_sparse(), torch.zeros(12)),
                   lambda: ops.embedding(torch.tensor([1, 2]), w.to_sparse())],
             # the residual was named x
             "residual": [lambda: ops.mlp(x, w, None, w.T.contiguous(), residual=x.to_sparse()),
                          lambda: ops.swiglu_mlp(x, torch.randn(24, 16), torch.randn(16, 12),
                                                 residual=x.to_sparse())]}
    for name, launches in calls.items():
        for launch in launches:
            with pytest.raises(coda.LaunchError, match=f"^{name} has layout torch.sparse_coo; .*to_dense"):
                launch()


def test_messages_name_the_argument_and_what_it_was():
    from coda import nn as cnn
    from coda import ops

    with pytest.raises(coda.LaunchError, match=r"interleave: w_gate has dtype torch\.int64"):
        ops.interleave(torch.ones(4, 3, dtype=torch.long), torch.ones(4, 3, dtype=torch.long), torch.ones(3))
    with pytest.raises(coda.LaunchError, match=r"g must be a tensor of shape \[16\] on cpu, got .* \[3\]"):
        cnn.layer_norm(torch.randn(2, 16), torch.ones(3), torch.zeros(16))


def test_a_device_constant_made_in_a_graph_capture_is_not_kept(monkeypatch):
    """A tensor first made during a CUDA graph's capture is filled only when the graph replays:
    it is made afresh then, and kept once made outside a capture."""
    made = []

    def make():
        made.append(1)
        return torch.arange(4)

    key = ("test constant", len(common._DEVICE_CONSTANTS))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    common.device_constant(key, make)
    common.device_constant(key, make)
    assert len(made) == 2 and key not in common._DEVICE_CONSTANTS
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    first = common.device_constant(key, make)
    assert common.device_constant(key, make) is first and len(made) == 3
    del common._DEVICE_CONSTANTS[key]


def test_a_device_constant_made_on_fake_tensors_is_not_kept():
    """A shape-propagating run on FakeTensors (docs/integrations.md invites one) makes its
    constants as FakeTensors: they are not kept, so a real run after it reads real values (a
    patched LLaMA's loss had turned NaN)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    key = ("test fake constant", len(common._DEVICE_CONSTANTS))
    with FakeTensorMode():
        common.device_constant(key, lambda: torch.arange(4))
    assert key not in common._DEVICE_CONSTANTS
    assert torch.equal(common.device_constant(key, lambda: torch.arange(4)), torch.arange(4))
    del common._DEVICE_CONSTANTS[key]


def test_numpy_scalars_are_numbers_like_pythons():
    """Hyperparameters read through NumPy (np.float32 probabilities, np.int64 seeds and indices)
    work as the Python numbers they stand for; bools, NumPy's included, stay refused."""
    np = pytest.importorskip("numpy")
    from coda import ops

    x = torch.randn(6, 8, dtype=torch.float64)
    w = torch.randn(12, 8, dtype=torch.float64)
    assert torch.equal(ops.linear(x, w, dropout_p=np.float32(0.5), seed=np.int64(3)),
                       ops.linear(x, w, dropout_p=0.5, seed=3))
    assert torch.equal(ops.dropout(x, np.float64(0.25), seed=np.int32(1)), ops.dropout(x, 0.25, seed=1))
    target = torch.randint(12, (6,))
    target[0] = -100
    assert torch.equal(ops.linear_cross_entropy(x, w, target, ignore_index=np.int64(-100)),
                       ops.linear_cross_entropy(x, w, target))
    ids = torch.tensor([0, 1, 2])
    assert torch.equal(ops.embedding(ids, w, padding_idx=np.int64(-11)), ops.embedding(ids, w, padding_idx=1))
    for seed in (np.bool_(True), True, 1.5):
        with pytest.raises(coda.LaunchError, match="seed must be an int or None"):
            ops.linear(x, w, dropout_p=0.5, seed=seed)


@pytest.mark.parametrize("producer", ["out_proj_residual", "mlp", "swiglu_mlp"])
def test_producer_row_sums_are_those_of_the_output_as_stored(producer):
    """float16 (interpreter): the row sums an op's epilogue hands the next norm (ss, and s for a
    LayerNorm) are those of its output rounded to float16, which is what that norm normalizes;
    the float32 values' sums differ from those by Σ 2 y δ (δ the rounding errors), about 1e-4
    of ss at a mean of 100 (docs/ops.md)."""
    g = torch.Generator().manual_seed(16)
    shapes = (37, 40), (36, 40), (36, 36), (37, 36)
    x, w, w2, residual = (torch.randn(*shape, generator=g) for shape in shapes)
    x, w, w2, residual = (t.half() for t in (x * 0.5, w / 40**0.5, w2 / 6, residual + 100.0))
    if producer == "out_proj_residual":
        y, ss, s = out_proj_residual(x, w, residual, stats="layer")
    elif producer == "mlp":
        y, ss, s = mlp(x, w, None, w2, residual=x[:, :36] + 100.0, stats="layer")
    else:
        y, ss = swiglu_mlp(x, interleave(w[:18], w[18:]), w2[:, :18], residual=residual, stats=True)
        s = y.sum(-1, dtype=torch.float32)
    stored = y.double()
    torch.testing.assert_close(ss.double(), (stored * stored).sum(-1), rtol=2e-6, atol=0)
    torch.testing.assert_close(s.double(), stored.sum(-1), rtol=2e-6, atol=0)
