"""coda.capture_step's checks, which run before anything touches a GPU: a clear CodaError for a
non-capturable optimizer, a bad warm-up count, a missing or CPU example batch, a step that returns
no tensor, and a replayed batch of another shape, dtype or set of names; and
`coda.integrations.hf.unpadded_batches`, which must put transformers back as it was.
(The capture itself: tests/gpu/test_launch_gpu.py.)"""

from __future__ import annotations

import contextlib
import threading

import pytest
import torch

import coda
from coda.integrations.cuda_graphs import CapturedStep, _loss_of, numbers_of


def optimizer(**options) -> torch.optim.Optimizer:
    return torch.optim.AdamW([torch.nn.Parameter(torch.zeros(3))], **options)


def one_group_not_capturable() -> torch.optim.Optimizer:
    """Capturable by default, but a parameter group of its own says otherwise."""
    return torch.optim.AdamW([{"params": [torch.nn.Parameter(torch.zeros(3))]},
                              {"params": [torch.nn.Parameter(torch.zeros(2))], "capturable": False}],
                             capturable=True)


def step(x: torch.Tensor) -> torch.Tensor:
    return x.sum()


@pytest.mark.parametrize(("args", "options", "message"), [
    ((step, optimizer()), dict(x=torch.zeros(2)), "AdamW must be created with capturable=True"),
    ((step, one_group_not_capturable()), dict(x=torch.zeros(2)), "in every parameter group"),
    ((step, "sgd"), dict(x=torch.zeros(2)), "optimizer must be a torch.optim.Optimizer, got str"),
    ((step, optimizer(capturable=True)), dict(warmup=0, x=torch.zeros(2)), "warmup must be an int >= 1"),
    ((step, optimizer(capturable=True)), dict(warmup=True, x=torch.zeros(2)), "warmup must be an int >= 1"),
    ((step, optimizer(capturable=True)), {}, "pass the example batch as keyword tensors"),
    ((step, optimizer(capturable=True)), dict(x=torch.zeros(2)),
     "CUDA graphs need CUDA tensors; input 'x' is on cpu"),
    ((step, optimizer(capturable=True)), dict(x=[1, 2]), "input 'x' is a list"),
])
def test_bad_captures_are_refused_before_any_step_runs(args, options, message):
    with pytest.raises(coda.CodaError, match=message):
        coda.capture_step(*args, **options)


def test_the_step_must_return_its_loss():
    with pytest.raises(coda.CodaError, match="must return its loss as a tensor, got float"):
        _loss_of(1.0)


class Graph:
    """Stands in for a captured CUDA graph: counts replays."""

    def __init__(self):
        self.replays = 0

    def replay(self) -> None:
        self.replays += 1


def test_a_replay_takes_a_batch_like_the_example():
    graph, ids = Graph(), torch.zeros(2, 8, dtype=torch.int64)
    captured = CapturedStep(graph, {"input_ids": ids}, torch.tensor(3.0))
    for batch, message in [({"labels": ids}, r"captured with inputs \['input_ids'\], got \['labels'\]"),
                           ({"input_ids": ids[:1]}, r"shape \[2, 8\] and dtype torch.int64 .* got \[1, 8\]"),
                           ({"input_ids": ids.int()}, r"got \[2, 8\] torch.int32"),
                           ({"input_ids": 5}, "got int")]:
        with pytest.raises(coda.CodaError, match=message):
            captured(**batch)
    assert graph.replays == 0
    new = torch.arange(16).reshape(2, 8)
    loss = captured(input_ids=new)
    assert graph.replays == 1 and torch.equal(ids, new)        # copied into the captured input
    assert loss.item() == 3.0 and loss.data_ptr() != captured.loss.data_ptr()   # a copy of the loss


@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler")   # no optimizer steps here
def test_a_replay_refuses_settings_changed_since_the_capture():
    """The graph replays the optimizer's numbers as captured: a scheduler that sets a float lr
    (or any changed setting) makes the next replay an error naming it, not a step at the old
    rate; a tensor lr, which schedulers change in place, and keys added since do not."""
    ids = torch.zeros(2, 8, dtype=torch.int64)

    def captured_with(opt: torch.optim.Optimizer) -> tuple[CapturedStep, Graph]:
        graph = Graph()
        return CapturedStep(graph, {"input_ids": ids}, torch.tensor(3.0), optimizer=opt,
                            hyperparameters=numbers_of(opt)), graph

    opt = optimizer(lr=1e-3, betas=(0.9, 0.95), capturable=True)
    step, graph = captured_with(opt)
    torch.optim.lr_scheduler.LambdaLR(opt, lambda i: 0.5)   # adds initial_lr, sets lr to 0.5 of it
    with pytest.raises(coda.CodaError, match=r"group 0's 'lr' is now 0.0005, but the captured step "
                                             r"replays 0.001 .* lr=torch.tensor\(0.001, device='cuda'\)"):
        step(input_ids=ids)
    opt.param_groups[0]["lr"] = 1e-3
    step(input_ids=ids)
    opt.param_groups[0]["betas"] = (0.9, 0.999)
    with pytest.raises(coda.CodaError, match=r"'betas' is now \(0.9, 0.999\).*capture the step again"):
        step(input_ids=ids)
    assert graph.replays == 1

    opt = optimizer(lr=torch.tensor(1e-3), capturable=True)
    step, graph = captured_with(opt)
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: 0.5 ** i)
    for _ in range(3):
        step(input_ids=ids)
        schedule.step()
    assert graph.replays == 3 and opt.param_groups[0]["lr"].item() == pytest.approx(1e-3 / 8)


def test_unpadded_batches_puts_transformers_back():
    masking_utils = pytest.importorskip("transformers.masking_utils")
    from coda.integrations.hf import unpadded_batches

    names = ("is_tracing", "find_packed_sequence_indices", "_ignore_causal_mask_sdpa",
             "_ignore_bidirectional_mask_sdpa")
    before = [getattr(masking_utils, name) for name in names]
    with unpadded_batches():
        assert masking_utils.is_tracing(None) is False   # no mask: nothing to trace
        assert masking_utils.find_packed_sequence_indices(torch.arange(8)[None]) is None
        assert masking_utils._ignore_causal_mask_sdpa(None, 8, 8, 0, 0) is True
        assert masking_utils._ignore_causal_mask_sdpa(None, 8, 8, 0, 0, local_attention_size=4) is False
        assert masking_utils._ignore_bidirectional_mask_sdpa(None, 8) is True
    assert [getattr(masking_utils, name) for name in names] == before


def test_unpadded_batches_of_two_threads_closing_out_of_order_put_transformers_back():
    """Thread A opens a block, B opens one, A closes, B closes (capture_step's context run per
    GPU in threads): transformers is as before, and B's block stays in force until it closes.
    Each block saved what it found and put it back at its end, so B put A's replacements back
    for good (packed sequences never detected again; an audit's find)."""
    masking_utils = pytest.importorskip("transformers.masking_utils")
    from coda.integrations.hf import unpadded_batches

    original = masking_utils.find_packed_sequence_indices
    a_open, b_open, a_closed = threading.Event(), threading.Event(), threading.Event()
    inside_b_after_a = []

    def a() -> None:
        with unpadded_batches():
            a_open.set()
            b_open.wait(10)
        a_closed.set()

    def b() -> None:
        a_open.wait(10)
        with unpadded_batches():
            b_open.set()
            a_closed.wait(10)
            inside_b_after_a.append(masking_utils.find_packed_sequence_indices is not original)

    threads = [threading.Thread(target=a), threading.Thread(target=b)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert inside_b_after_a == [True]
    assert masking_utils.find_packed_sequence_indices is original


@pytest.mark.parametrize("family", ["llama", "bert"])
def test_unpadded_batches_give_sdpa_no_mask_under_torch_compile(family, monkeypatch):
    """Traced by Dynamo inside the context, a batch without an attention mask reaches SDPA with no
    mask (LLaMA: is_causal=True), so its fused kernels keep their causal skip. transformers as the
    GPU machine has it (5.17, PyTorch 2.11) builds a full mask under Dynamo; this test makes the
    installed transformers do the same (every check of tracing or exporting answers yes) and sees
    the mask without the context, none within it."""
    transformers = pytest.importorskip("transformers")
    masking_utils = pytest.importorskip("transformers.masking_utils")
    from coda.integrations.hf import unpadded_batches

    monkeypatch.setattr(masking_utils, "is_tracing", lambda tensor=None: True)
    if hasattr(masking_utils, "is_torchdynamo_exporting"):
        monkeypatch.setattr(masking_utils, "is_torchdynamo_exporting", lambda: True)
    torch.manual_seed(0)
    small = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                 vocab_size=64, attn_implementation="sdpa")
    model = (transformers.LlamaForCausalLM(transformers.LlamaConfig(**small, num_key_value_heads=1))
             if family == "llama" else transformers.BertForMaskedLM(transformers.BertConfig(**small)))

    def sdpa_masks(context) -> list:
        calls = []

        def record(gm, example_inputs):
            calls.extend(node for node in gm.graph.nodes if node.op == "call_function"
                         and node.target is torch.nn.functional.scaled_dot_product_attention)
            return gm.forward

        torch._dynamo.reset()
        with context():
            torch.compile(model, backend=record)(input_ids=torch.randint(64, (2, 8)))
        torch._dynamo.reset()
        assert calls, "no SDPA call in the traced graph"
        return [(node.kwargs.get("attn_mask"), node.kwargs.get("is_causal")) for node in calls]

    assert all(mask is not None for mask, _ in sdpa_masks(contextlib.nullcontext))
    assert sdpa_masks(unpadded_batches) == [(None, family == "llama")]
