"""layer_norm_linear's backward in its one-pass form (dy @ w plain, LayerNorm's one-pass kernel
writing dx, dg, dβ and the norm's output, dw a plain GEMM) against the map form (the dxhat GEMM
with x as a tile operand and two row sums, the dx map, the dw GEMM with column sums), in one
process: `coda.ops.norms.layer_norm_one_pass` decides, and is patched to False for the map form.

1. GPT-2's ln_1 + c_attn at 16384 x 768 -> 3 x 768 (Conv1D weight, split into q, k, v), forward +
   backward captured as a CUDA graph per form, replayed in alternating order (ABBA), medians; the
   gradients of both forms and of eager bf16 against float64.
2. GPT-2's whole training step (`coda.patch`, `coda.capture_step`), one model per form from one
   initialization, replayed in alternating rounds: tokens/s per form.
Run: python benchmarks/results/session40/ln_linear_probe.py"""

import contextlib
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

import coda
from coda.ops import norms

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import train  # benchmarks/train.py


@contextlib.contextmanager
def patched(module, name: str, value):
    """Inside: `module.name` is `value`."""
    saved = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, saved)


#: The forms compared, each a context inside which layer_norm_linear's backward takes it; the
#: step timing's ratio is the first over the second. (The forty-first session's probe imports this
#: script with other forms.)
FORMS = {"one-pass": contextlib.nullcontext,
         "maps": lambda: patched(norms, "layer_norm_one_pass", lambda *args: False)}


def op_inputs(dtype=torch.bfloat16):
    gen = torch.Generator(device="cuda").manual_seed(0)
    m, k, n = 16384, 768, 2304

    def rand(*shape, scale=1.0):
        return (torch.randn(*shape, generator=gen, device="cuda") * scale).to(dtype)
    x, g, beta = rand(m, k) + 0.5, 1 + rand(k, scale=0.1), rand(k, scale=0.1)
    w_stored, bias = rand(k, n, scale=k ** -0.5), rand(n, scale=0.1)   # Conv1D: [in, out]
    dys = [rand(m, k) for _ in range(3)]
    return x, g, beta, w_stored, bias, dys


def op_grads(x, g, beta, w_stored, bias, dys, fused: bool):
    leaves = [t.detach().clone().requires_grad_() for t in (x, g, beta, w_stored, bias)]
    xl, gl, bl, wl, bsl = leaves
    if fused:
        outs = coda.ops.layer_norm_linear(xl, gl, bl, wl.T, bias=bsl, split=[768] * 3)
    else:
        outs = F.linear(F.layer_norm(xl, (768,), gl, bl, 1e-5), wl.T, bsl).split(768, -1)
    torch.autograd.backward(outs, dys)
    return [t.grad for t in leaves]


def report(label: str, got: list, exact: list) -> None:
    names = ("dx", "dg", "dbeta", "dw", "db")
    errs = [((a.double() - e).norm() / e.norm()).item() for a, e in zip(got, exact, strict=True)]
    print(f"{label} rel. errors vs float64: " + ", ".join(f"{n} {v:.2e}" for n, v in
                                                          zip(names, errs, strict=True)), flush=True)


def check_numerics() -> None:
    x, g, beta, w, bias, dys = op_inputs()
    exact = op_grads(*(t.double() for t in (x, g, beta, w, bias)), [d.double() for d in dys], fused=False)
    for name, form in FORMS.items():
        with form():
            report(f"{name:10s}", op_grads(x, g, beta, w, bias, dys, fused=True), exact)
    report("eager bf16", op_grads(x, g, beta, w, bias, dys, fused=False), exact)


def graphed(fn):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph


def time_graphs(graphs: dict, rounds: int, replays: int) -> dict:
    times = {name: [] for name in graphs}
    names = list(graphs)
    for r in range(rounds):
        order = names + names[::-1] if r % 2 == 0 else names[::-1] + names
        for name in order:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(replays):
                graphs[name].replay()
            end.record()
            end.synchronize()
            times[name].append(start.elapsed_time(end) / replays)
    return {name: statistics.median(t) for name, t in times.items()}


def op_timing() -> None:
    x, g, beta, w, bias, dys = op_inputs()
    graphs = {}
    for name, form in FORMS.items():
        leaves = [t.detach().clone().requires_grad_() for t in (x, g, beta, w, bias)]

        def fwd_bwd(leaves=leaves):
            xl, gl, bl, wl, bsl = leaves
            for t in leaves:
                t.grad = None
            outs = coda.ops.layer_norm_linear(xl, gl, bl, wl.T, bias=bsl, split=[768] * 3)
            torch.autograd.backward(outs, dys)
        with form():
            graphs[name] = graphed(fwd_bwd)
    ms = time_graphs(graphs, 10, 20)
    print("ln_1 + c_attn fwd+bwd, µs a replay: " + ", ".join(f"{n} {1e3 * v:.1f}" for n, v in ms.items()),
          flush=True)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for graph in graphs.values():
            graph.replay()
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=14, max_name_column_width=50))


def step_timing(after=None) -> None:
    """`after(steps)`, when given, runs last on the captured steps (the 43rd session's probe)."""
    device, dtype = torch.device("cuda"), torch.bfloat16
    batch, seq = train.SHAPES["gpt2"]
    steps = {}
    for name, form in FORMS.items():
        model = train.build("gpt2", False, device, dtype)
        coda.patch(model)
        optimizer = torch.optim.AdamW(model.parameters(), lr=train.LR, fused=True, capturable=True)
        generator = torch.Generator().manual_seed(train.SEED)
        vocab = model.config.vocab_size
        inputs = train.model_inputs("gpt2", torch.randint(vocab, (batch, seq), generator=generator), vocab,
                                    generator, device)

        def train_step(model=model, optimizer=optimizer, **batch_inputs):
            loss = model(**batch_inputs).loss
            loss.backward()
            optimizer.step()
            return loss
        with form():
            captured = coda.capture_step(train_step, optimizer, warmup=3, context=train.unpadded_batches,
                                         **inputs)
        steps[name] = (captured, inputs)
    rates = {name: [] for name in steps}
    names = list(steps)
    for r in range(12):
        for name in (names if r % 2 == 0 else names[::-1]):
            captured, inputs = steps[name]
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(20):
                captured(**inputs)
            torch.cuda.synchronize()
            rates[name].append(20 * batch * seq / (time.perf_counter() - start))
    first, second = names
    per_round = [a / b for a, b in zip(rates[first], rates[second], strict=True)]
    print("GPT-2 coda+graph tokens/s, medians of 12 rounds of 20 steps: " +
          ", ".join(f"{n} {statistics.median(v) / 1e3:.1f}k" for n, v in rates.items()) +
          f"; {first} / {second} round by round: median {statistics.median(per_round):.4f} "
          f"({min(per_round):.4f}-{max(per_round):.4f})", flush=True)
    if after is not None:
        after(steps)


if __name__ == "__main__":
    check_numerics()
    op_timing()
    step_timing()
