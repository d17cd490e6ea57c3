"""GPU checks of coda.ops.linear_cross_entropy: bf16 at real shapes.

For the loss and every gradient: CODA's relative error against float64 (the unfused formula, the
logits materialized, run on the same bf16 inputs upcast) must be at most twice the relative error
of eager PyTorch running the unfused formula in bf16, plus 1e-6 (tests/gpu/accuracy.py).
`launch_count_cases()` gives the lead's profiler forward+backward closures to count kernels.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from accuracy import assert_within_eager

from coda.ops.cross_entropy import linear_cross_entropy

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

BF16 = torch.bfloat16
EPS = 1e-6


def formula(x, w, target, b, nw, **options):
    """RMSNorm (optional), LM head, cap and cross-entropy, unfused, in the inputs' dtype."""
    if nw is not None:
        x = x * torch.rsqrt((x * x).mean(-1, keepdim=True) + EPS) * nw
    logits = F.linear(x, w, b)
    if options.get("softcap") is not None:
        logits = options["softcap"] * torch.tanh(logits / options["softcap"])
    return F.cross_entropy(logits, target, reduction=options.get("reduction", "mean"),
                           label_smoothing=options.get("label_smoothing", 0.0))


def run(fn, inputs, target, upstream, **options):
    """The loss and the gradients of <loss, upstream> w.r.t. every tensor input."""
    leaves = [None if t is None else t.detach().clone().requires_grad_() for t in inputs]
    loss = fn(*leaves[:2], target, *leaves[2:], **options)
    grads = torch.autograd.grad(loss, [t for t in leaves if t is not None], upstream.to(loss.dtype))
    return [loss, *grads]


def coda_fn(x, w, target, b, nw, **options):
    return linear_cross_entropy(x, w, target, bias=b, norm_weight=nw, norm_eps=EPS, **options)


@pytest.mark.parametrize(("tokens", "hidden", "vocab", "bias", "norm", "options"), [
    (4096, 768, 50257, False, False, {}),   # GPT-2 (exponential path), V odd: 2 row blocks of 2560
    (4096, 768, 50257, False, False, dict(exponential=False)),   # the same, its general path
    (4096, 768, 50257, False, False, dict(low_memory=True)),   # 79 chunks / 86 row blocks
    (4096, 2048, 32000, True, False, dict(label_smoothing=0.1, softcap=30.0)),
    (2048, 4096, 128256, False, True, {}),  # Llama 3, final norm folded: 2 blocks of 1024 rows
    (2048, 4096, 128256, False, True, dict(low_memory=True)),   # 48-row blocks
    (2048, 4096, 32000, False, False, dict(reduction="none", chunk_size=4096)),
])
def test_linear_cross_entropy_bf16(tokens, hidden, vocab, bias, norm, options):
    torch.manual_seed(5)
    x = torch.randn(tokens, hidden, device="cuda").to(BF16)
    w = (torch.randn(vocab, hidden, device="cuda") * 2 / hidden**0.5).to(BF16)
    b = (torch.randn(vocab, device="cuda") * 0.5).to(BF16) if bias else None
    nw = (torch.rand(hidden, device="cuda") + 0.5).to(BF16) if norm else None
    target = torch.randint(0, vocab, (tokens,), device="cuda")
    target[torch.rand(tokens, device="cuda") < 0.1] = -100
    upstream = torch.randn(tokens if options.get("reduction") == "none" else (), device="cuda")
    inputs = [x, w, b, nw]
    ours = run(coda_fn, inputs, target, upstream, **options)
    eager = run(formula, inputs, target, upstream, **options)
    exact = run(formula, [None if t is None else t.double() for t in inputs], target,
                upstream.double(), **options)
    names = ["loss", "dx", "dw"] + ["db"] * bias + ["dnorm_weight"] * norm
    for name, a, e, r in zip(names, ours, eager, exact, strict=True):
        # the loss is float32 (the statistics' precision), the gradients in their inputs' dtype
        assert a.shape == e.shape and a.dtype == (torch.float32 if name == "loss" else e.dtype), name
        assert_within_eager(f"cross_entropy {tokens}x{hidden}x{vocab} {name}", a, e, r)


@pytest.mark.parametrize(("tokens", "hidden", "vocab", "bias", "norm", "counted", "options"), [
    (16384, 768, 30522, True, False, 0.15, {}),   # BERT's masked-LM head: 15% of the rows count
    (16384, 768, 50257, False, False, 0.5, {}),   # GPT-2: the second block of rows all skipped
    (8192, 768, 50257, False, False, 1.0, {}),    # every row counts
    (4096, 2048, 32000, False, True, 0.3, dict(label_smoothing=0.1)),
    (4096, 768, 30522, True, False, 0.0, dict(reduction="sum")),   # none counts: zeros
])
def test_skip_ignored_bf16(tokens, hidden, vocab, bias, norm, counted, options):
    """skip_ignored=True through the Hopper kernels (their M and K limits read on the device):
    within twice eager's error, as the full computation."""
    torch.manual_seed(8)
    x = torch.randn(tokens, hidden, device="cuda").to(BF16)
    w = (torch.randn(vocab, hidden, device="cuda") * 2 / hidden**0.5).to(BF16)
    b = (torch.randn(vocab, device="cuda") * 0.5).to(BF16) if bias else None
    nw = (torch.rand(hidden, device="cuda") + 0.5).to(BF16) if norm else None
    target = torch.randint(0, vocab, (tokens,), device="cuda")
    target[torch.rand(tokens, device="cuda") >= counted] = -100
    upstream = torch.randn((), device="cuda")
    inputs = [x, w, b, nw]
    ours = run(coda_fn, inputs, target, upstream, skip_ignored=True, **options)
    if counted == 0.0:
        assert ours[0].item() == 0.0 and all(g.abs().max().item() == 0.0 for g in ours[1:])
        return
    eager = run(formula, inputs, target, upstream, **options)
    exact = run(formula, [None if t is None else t.double() for t in inputs], target,
                upstream.double(), **options)
    names = ["loss", "dx", "dw"] + ["db"] * bias + ["dnorm_weight"] * norm
    for name, a, e, r in zip(names, ours, eager, exact, strict=True):
        assert_within_eager(f"cross_entropy skip_ignored {tokens}x{hidden}x{vocab} {name}", a, e, r)


@pytest.mark.parametrize("hot_ignored", [False, True])
def test_exponential_path_past_its_headroom_bf16(hot_ignored):
    """GPT-2's head where some rows' logits reach ~150 above their reference (the log-sum-exp of
    the first 256 columns): exp would overflow, so the block's forward runs again from c = lse
    (the ping-pong and persistent kernels' m_limit read on the device), also where those rows
    are ignored (their zero gradient share must not become 0 * inf). Within twice eager's
    error; the rows far from the reference are a quarter of the batch."""
    torch.manual_seed(9)
    tokens, hidden, vocab = 4096, 768, 50257
    x = torch.randn(tokens, hidden, device="cuda").to(BF16)
    w = (torch.randn(vocab, hidden, device="cuda") * 2 / hidden**0.5)
    w[:256] *= 0.01
    target = torch.randint(256, vocab, (tokens,), device="cuda")
    hot = torch.arange(0, tokens, 4, device="cuda")   # row i's target logit about 150
    w[target[hot]] += 150 * x[hot].float() / x[hot].float().square().sum(1, keepdim=True)
    w = w.to(BF16)
    if hot_ignored:
        target[hot] = -100
    upstream = torch.randn((), device="cuda")
    ours = run(coda_fn, [x, w, None, None], target, upstream, exponential=True)
    eager = run(formula, [x, w, None, None], target, upstream)
    exact = run(formula, [x.double(), w.double(), None, None], target, upstream.double())
    for name, a, e, r in zip(["loss", "dx", "dw"], ours, eager, exact, strict=True):
        assert_within_eager(f"cross_entropy past the headroom {name}", a, e, r)


# kernel counts (the lead's profiler) ---------------------------------------------------------------
def launch_count_cases():
    """(name, coda_fn, eager_fn): forward + backward once, bf16 on CUDA, hidden 2048, 4096 tokens;
    vocabulary 32000 and 128256, and 32000 after an RMSNorm."""
    torch.manual_seed(6)
    tokens, hidden = 4096, 2048
    x = torch.randn(tokens, hidden, device="cuda").to(BF16).requires_grad_()
    nw = (torch.rand(hidden, device="cuda") + 0.5).to(BF16).requires_grad_()
    cases = []
    for vocab, norm in ((32000, False), (128256, False), (32000, True)):
        w = (torch.randn(vocab, hidden, device="cuda") / hidden**0.5).to(BF16).requires_grad_()
        target = torch.randint(0, vocab, (tokens,), device="cuda")
        leaves = [x, w, nw] if norm else [x, w]

        def fwd_bwd(fn, w=w, target=target, leaves=leaves, nw=nw if norm else None):
            return lambda: torch.autograd.grad(fn(x, w, target, None, nw), leaves)

        name = f"{'rmsnorm_' * norm}lm_head_cross_entropy_v{vocab}"
        cases.append((name, fwd_bwd(coda_fn), fwd_bwd(formula)))
    return cases


@pytest.mark.parametrize("low_memory", [False, True])
def test_float16_folded_norm_with_a_large_hidden_state(low_memory):
    """float16 with the final norm folded and a large hidden state (rms 30; at 100 eager's x * x
    overflows float16): the path that stores the logits' gradient unscaled (Blocks.unscaled), on
    the GPU's kernels (the interpreter's test, tests/ops, holds it to eager at rms 300)."""
    torch.manual_seed(6)
    tokens, hidden, vocab = 2048, 2048, 32000
    x = (torch.randn(tokens, hidden, device="cuda") * 30).half()
    w = (torch.randn(vocab, hidden, device="cuda") / hidden**0.5).half()
    nw = (torch.rand(hidden, device="cuda") + 0.5).half()
    target = torch.randint(0, vocab, (tokens,), device="cuda")
    target[torch.rand(tokens, device="cuda") < 0.1] = -100
    upstream = torch.tensor(0.125, device="cuda")
    inputs = [x, w, None, nw]
    ours = run(coda_fn, inputs, target, upstream, low_memory=low_memory)
    eager = run(formula, inputs, target, upstream)
    exact = run(formula, [None if t is None else t.double() for t in inputs], target, upstream.double())
    for name, a, e, r in zip(["loss", "dx", "dw", "dnorm_weight"], ours, eager, exact, strict=True):
        assert_within_eager(f"cross_entropy float16 norm rms 30 {name}", a, e, r)
