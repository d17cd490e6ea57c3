"""GPU checks of the cached launch path (`Plan.run` through `direct_launcher`) and of CUDA-graph
capture: a cached launch on the default stream, on a side stream and replayed from a graph gives
the bits of a first launch through Triton's JIT; dropout refuses to draw a seed under capture; a
CODA-patched model's whole training step (`coda.capture_step`) replays from a graph with the losses of
eager steps on the same batches; a captured step keeps alive what its graph writes.
"""

from __future__ import annotations

import pytest
import torch

import coda
from coda import ops
from coda.errors import LaunchError

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

PROGRAM = ("EPILOGUE(bias: col, residual: tile, p: scalar) { h = input + bias; save pre = h;"
           " output = dropout(gelu(h), p) + residual; ss = row_sum(output * output);"
           " db = col_sum(h); }")
#: (M, N, K): ping-pong (K <= 1024), persistent TMA (K > 1024) and, with K * 2 bytes not a
#: multiple of 16, the portable kernel.
SHAPES = [(1000, 1536, 768), (1024, 1100, 2048), (1000, 1100, 520 + 1)]


def operands(m: int, n: int) -> dict:
    return dict(bias=torch.randn(n, device="cuda", dtype=torch.bfloat16),
                residual=torch.randn(m, n, device="cuda", dtype=torch.bfloat16), p=0.1)


@pytest.mark.parametrize("shape", SHAPES)
def test_cached_launches_equal_first_launches(shape):
    m, n, k = shape
    prog = coda.compile(PROGRAM)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k**0.5
    ops = operands(m, n)
    prog(torch.randn(m, k, device="cuda", dtype=torch.bfloat16), w.T, seed=1, **ops)  # makes the plan
    (plan,) = prog._plans.values()
    assert plan.launcher is not None
    side = torch.cuda.Stream()
    for stream in (torch.cuda.current_stream(), side, torch.cuda.current_stream()):
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            cached = prog(a, w.T, seed=5, **ops)
        torch.cuda.current_stream().wait_stream(side)
        first = prog.triton.launch(prog.bind(a, w.T, seed=5, **ops), plan.config)  # through the JIT
        for name, value in first.items():
            assert torch.equal(cached[name], value), name


def test_pingpong_plan_replays_from_a_cuda_graph():
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("Hopper only")
    m, n, k = SHAPES[0]
    prog = coda.compile(PROGRAM)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k**0.5
    ops = operands(m, n)
    prog(a, w.T, seed=3, **ops)
    (plan,) = prog._plans.values()
    assert plan.kernel.variant == "pingpong", plan.config
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = prog(a, w.T, seed=3, **ops)
    for _ in range(2):
        a.copy_(torch.randn_like(a))
        graph.replay()
        fresh = prog.triton.launch(prog.bind(a, w.T, seed=3, **ops), plan.config)
        for name, value in fresh.items():
            assert torch.equal(captured[name], value), name


@pytest.mark.parametrize("shape", SHAPES[:2])
def test_two_graphs_of_one_plan_replay_side_by_side(shape):
    """Two graphs capture one plan on torch's shared capture stream, each on its own A and B (so
    its own TMA descriptors, which a persistent kernel writes to scratch memory at its start);
    replayed at once on two streams, between eager launches of the same plan, each gives its
    launch's bits: a captured launch takes scratch of its own from the graph's pool. (Before it
    did, the two graphs shared one buffer and this passed anyway, 3 of 3 runs on an H100: the
    race did not show; the last assertion is the one that catches a shared buffer.)"""
    m, n, k = shape
    prog = coda.compile("EPILOGUE(bias: col) { output = gelu(input + bias); }")
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    inputs = [(torch.randn(m, k, device="cuda", dtype=torch.bfloat16),
               torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k**0.5) for _ in range(3)]
    expected = [prog(a, w.T, bias=bias)["output"] for a, w in inputs]   # also makes the plan
    assert len(prog._plans) == 1
    graphs, captured = [torch.cuda.CUDAGraph() for _ in range(2)], []
    for graph, (a, w) in zip(graphs, inputs[:2], strict=True):
        with torch.cuda.graph(graph):
            captured.append(prog(a, w.T, bias=bias)["output"])
    streams = [torch.cuda.Stream() for _ in graphs]
    a, w = inputs[2]
    for _ in range(20):
        for graph, stream, out in zip(graphs, streams, captured, strict=True):
            out.fill_(float("nan"))
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                graph.replay()
        eager = prog(a, w.T, bias=bias)["output"]
        for stream in streams:
            torch.cuda.current_stream().wait_stream(stream)
        for out, want in zip([*captured, eager], expected, strict=True):
            assert torch.equal(out, want)
    (plan,) = prog._plans.values()   # its launcher keeps scratch for the eager launches' stream only
    cells = dict(zip(plan.launcher.__code__.co_freevars, plan.launcher.__closure__, strict=True))
    kept = cells["scratch"].cell_contents if "scratch" in cells else {}
    assert set(kept) <= {torch.cuda.current_stream().cuda_stream}


def test_a_shape_first_launched_under_capture_runs_untuned(monkeypatch, tmp_path):
    """With autotuning on (the default), a shape whose first launch happens while a CUDA graph is
    captured cannot be timed there (timing invalidated the capture, and PyTorch's error at the
    capture's end named none of it): it runs the heuristic's configuration in the graph, with a
    warning, and is tuned at its first launch outside a capture (the plan made in the capture is
    not kept)."""
    from coda.codegen import tuning

    monkeypatch.setenv("CODA_AUTOTUNE", "1")
    monkeypatch.setenv("CODA_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(tuning, "STORE", tuning.TuningStore())
    m, n, k = SHAPES[1]
    prog = coda.compile("EPILOGUE(bias: col) { output = gelu(input + bias) * 3.0; }")
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k**0.5
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    graph = torch.cuda.CUDAGraph()
    with pytest.warns(UserWarning, match="first launched while a CUDA graph is captured"):
        with torch.cuda.graph(graph):
            captured = prog(a, w.T, bias=bias)["output"]
    assert not prog.triton._configs and not prog._plans   # nothing tuned or kept yet
    captured.fill_(float("nan"))
    graph.replay()
    launch = prog.bind(a, w.T, bias=bias)
    heuristic = tuning.heuristic("hopper", m, n, k) if torch.cuda.get_device_capability()[0] == 9 else None
    if heuristic is not None:
        assert torch.equal(captured, prog.triton.launch(launch, heuristic)["output"])
    want = prog.reference(a.double(), w.T.double(), bias=bias.double())["output"]
    assert ((captured.double() - want).abs().max() / want.abs().max()).item() < 1e-2
    eager = prog(a, w.T, bias=bias)["output"]   # outside the capture: tuned now
    assert len(prog.triton._configs) == 1 and len(tuning.STORE._read(tuning.STORE.path)) == 1
    assert len(prog._plans) == 1
    assert ((eager.double() - want).abs().max() / want.abs().max()).item() < 1e-2


def test_dropout_refuses_to_draw_a_seed_under_capture():
    x = torch.randn(256, 512, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(384, 512, device="cuda", dtype=torch.bfloat16)
    ops.linear(x, w, dropout_p=0.1, seed=1)   # compiled outside the capture
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(LaunchError, match="CUDA graph"):
        with torch.cuda.graph(graph):
            ops.linear(x, w, dropout_p=0.1)


def patched_gpt2_training(capturable: bool, lr: float | torch.Tensor = 1e-2, **size: int):
    """(train_step(input_ids) -> loss, its AdamW) of a small CODA-patched GPT-2 of `size`
    (GPT2Config's n_embd, n_layer, n_head, vocab_size, n_positions; bf16, no dropout): forward,
    backward and optimizer step, as coda.capture_step takes them."""
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(**size, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                     use_cache=False, attn_implementation="sdpa")
    model = coda.patch(transformers.GPT2LMHeadModel(config).cuda().bfloat16().train())
    opt = torch.optim.AdamW(model.parameters(), lr=lr, fused=True, capturable=capturable)

    def train_step(input_ids: torch.Tensor) -> torch.Tensor:
        loss = model(input_ids=input_ids, labels=input_ids).loss
        loss.backward()
        opt.step()
        return loss
    return train_step, opt


def test_patched_gpt2_training_step_replays_from_a_cuda_graph():
    """coda.capture_step: each replay trains on the batch it is given, as eager steps on the same
    batches do (the warm-up step trains on the example batch, the first of them)."""
    from coda.integrations.hf import unpadded_batches

    generator = torch.Generator("cuda").manual_seed(0)
    batches = [torch.randint(1000, (4, 256), device="cuda", generator=generator) for _ in range(4)]

    def trained(graph: bool) -> list[float]:
        torch.manual_seed(0)
        train_step, opt = patched_gpt2_training(graph, n_embd=256, n_layer=2, n_head=4, vocab_size=1000,
                                                n_positions=256)
        if not graph:
            losses = []
            for ids in batches:
                losses.append(train_step(ids).item())
                opt.zero_grad(set_to_none=True)
            return losses
        step = coda.capture_step(train_step, opt, warmup=1, context=unpadded_batches, input_ids=batches[0])
        return [step.warmup_losses[0].item()] + [step(input_ids=ids).item() for ids in batches[1:]]

    eager, replayed = trained(False), trained(True)
    assert replayed == pytest.approx(eager, rel=1e-3), (replayed, eager)
    assert len(set(replayed)) == len(replayed), replayed   # each replay updated the weights


def test_a_captured_step_follows_the_schedule_of_a_tensor_lr():
    """With lr a tensor on the GPU, which the capturable fused AdamW reads at every replay, a
    scheduler that halves it between replays trains as eager steps on the same schedule do, and
    the schedule shows (a constant rate trains otherwise)."""
    from coda.integrations.hf import unpadded_batches

    ids = torch.randint(1000, (4, 256), device="cuda", generator=torch.Generator("cuda").manual_seed(1))
    size = dict(n_embd=256, n_layer=2, n_head=4, vocab_size=1000, n_positions=256)

    def trained(graph: bool, halving: bool = True) -> list[float]:
        torch.manual_seed(0)
        lr = torch.tensor(1e-2, device="cuda") if graph else 1e-2
        train_step, opt = patched_gpt2_training(graph, lr=lr, **size)
        schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: 0.5 ** i if halving else 1.0)
        if not graph:
            losses = []
            for _ in range(4):
                losses.append(train_step(ids).item())
                opt.zero_grad(set_to_none=True)
                schedule.step()
            return losses
        step = coda.capture_step(train_step, opt, warmup=1, context=unpadded_batches, input_ids=ids)
        schedule.step()   # after the warm-up step, the schedule's first
        losses = [step.warmup_losses[0].item()]
        for _ in range(3):
            losses.append(step(input_ids=ids).item())
            schedule.step()
        return losses

    eager, replayed = trained(False), trained(True)
    assert replayed == pytest.approx(eager, rel=1e-3), (replayed, eager)
    constant = trained(False, halving=False)
    assert abs(constant[-1] - eager[-1]) > 1e-2 * abs(eager[-1]), (constant, eager)


def test_a_captured_step_keeps_its_model_and_optimizer_alive():
    """A graph holds no references to the memory it writes: the CapturedStep keeps the step
    function and the optimizer. Two steps captured in turn from models and optimizers that only
    their steps keep (the second capture empties the allocator's cache) both replay and train."""
    import gc

    from coda.integrations.hf import unpadded_batches

    ids = torch.randint(500, (4, 128), device="cuda")

    def captured():   # the model and optimizer: referenced by the step function alone
        train_step, opt = patched_gpt2_training(True, n_embd=128, n_layer=1, n_head=2, vocab_size=500,
                                                n_positions=128)
        return coda.capture_step(train_step, opt, warmup=1, context=unpadded_batches, input_ids=ids)

    first = captured()
    gc.collect()
    second = captured()
    losses = [step(input_ids=ids).item() for step in (first, second, first, second)]
    assert all(torch.isfinite(torch.tensor(losses))), losses
    assert losses[2] < losses[0] and losses[3] < losses[1], losses   # each step trained its model
