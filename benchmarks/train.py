"""End-to-end training benchmark: HuggingFace GPT-2, LLaMA, BERT (and Gemma), eager / torch.compile /
Liger / CODA.

    python benchmarks/train.py [--models gpt2,llama+bert] [--modes eager,compile,liger,coda,
                               coda+compile,eager+graph,compile+graph,coda+graph]
                               [--steps 20] [--rounds 1] [--warmup 5] [--profile eager,coda]
                               [--curve gpt2|llama|bert|none] [--curve-steps 200] [--timeout 300]
                               [--tree NAME=PATH ...] [--json benchmarks/results/train.json] [--smoke]

A training step is forward, backward and `torch.optim.AdamW(fused=True)` on a randomly initialized model
whose weights are bfloat16 (no float32 master copy), attention through SDPA, the same batch at every step
and in every mode. Every dropout probability is set to 0 so that all modes compute the same math (CODA's
dropout masks are not torch's, so with dropout the losses could not be compared step by step); this also
takes away the dropout that CODA would fuse into its epilogues. Models (random init, seed 0):

    gpt2   GPT2LMHeadModel, GPT-2 124M (768 hidden, 12 layers, 12 heads, vocab 50257), batch 16 x 1024
    llama  LlamaForCausalLM, 2048 hidden, 8 layers, 16 heads / 4 KV heads, ffn 5632, vocab 32000, 8 x 2048
    bert   BertForMaskedLM, bert-base (768, 12 layers, 12 heads, vocab 30522), batch 32 x 512, 15% masked
    gemma  GemmaForCausalLM, Gemma-2B's layers (2048 hidden, 8 heads of 256 / 1 KV head, GeGLU ffn
           16384) but 6 of them and vocab 32000 (not 256000: the head would be most of the step),
           4 x 2048 (its runs warm up side by side: at 8 x 2048 six of them would not fit 80 GB);
           not in the default --models (the report's three)

Modes: `eager` (HF as is), `compile` (`torch.compile(model)`), `liger` (Liger Kernel's
`apply_liger_kernel_to_llama(model=...)`, `..._gemma`; Liger has no GPT-2 or BERT support), `coda`
(`coda.patch(model)`), `coda+compile` (patched, then compiled), and `eager+graph` / `compile+graph`
/ `coda+graph`: the whole step (forward, backward, optimizer) captured once as a CUDA graph and replayed
(`coda.capture_step`, with `coda.integrations.hf.unpadded_batches`), which takes the host time per
kernel away (two peers and a CODA mode: a user can capture any; the optimizer is then
AdamW(fused=True, capturable=True)). The compiled modes run inside `unpadded_batches` too, so that
transformers does not give SDPA a full causal mask while Dynamo traces (from the fifteenth session's
code on; that session's compiled rows were measured without it). CODA's ratios are over the fastest
peer that ran (eager, compile,
Liger, eager+graph, compile+graph). Each (model, mode) runs in its own
subprocess, so that GPU memory, compile caches and Liger's patching of HF's module-level classes do not
leak into the next run; a failure (exception, out of memory, timeout) becomes the row's `error`.
With CODA_AUTOTUNE=0 (run_all.sh) the subprocesses of one model start together and warm up side
by side (most of a run is compilation; benchmarks/side_by_side.py); then, once all are warm, each
in turn, while the others wait idle with their cached GPU memory given back, runs one more untimed
step and times its steps alone. Models joined by "+" in --models (`llama+bert`) warm up together
too, as one group: their runs' memory must fit the GPU at once (LLaMA's five runs and BERT's four
peaked at about 66 and 33 GB). With CODA's
autotuning on they run one after the other (tuning times kernels: it must have the GPU to
itself). The loss curve runs during the first group's warm-up.

Per run: `--warmup` steps (compilation, CODA's autotuning), then `--steps` timed steps between two
`torch.cuda.synchronize()`: tokens/s and ms per step over the whole timed stretch, the peak memory of
the timed steps (`torch.cuda.max_memory_allocated`), the per-step losses, and the GPU's SM clock, power
and power-cap share over the timed stretch (`gpu_clock`: NVML every 10 ms). With `--rounds R` the steps
are timed R times, the runs of a model group taking their rounds in turn (each waits idle between
its rounds, as between warm-up and turn; each round starts one run further on, so that with R a
multiple of the group's runs each run takes each place in a round equally often): a run's rate
is its rounds' median, each round is in
its `rounds`, and `paired_ratios` gives each CODA mode's rate over the fastest peer's round by
round (the GPU's clock drifts under its power cap by more than the margins at stake; two runs
timed seconds apart see the same drift). For the modes in `--profile`,
one more step under `torch.profiler` splits its GPU kernel time into GEMM, attention, CODA (the
generated `coda_gemm_*` / `coda_map_*` kernels), optimizer and other (µs per step, plus the top
kernels and the launch count).

`--curve MODEL` trains that model in eager mode and with CODA for `--curve-steps` steps on real text,
and once more in eager mode with PyTorch's math attention instead of its fused kernels (the same
model, rounded differently: how far two correct bf16 runs drift apart, the noise CODA's curve is
held to):
the King James Bible as byte tokens (coda.train's corpus; ids < 256 fit every vocabulary), random
windows from a seeded generator, identical initialization and batches for both, AdamW at lr 3e-4 with
coda.train's warmup (5% of the steps) and cosine decay; the benchmark's batch shape, so that CODA's
tuned configurations are reused (200 steps of GPT-2 take about 20 s per mode at 192k tokens/s). The
losses go into the JSON and a PNG, docs/img/train_loss_<model>.png.

The JSON (--json) is rewritten after every run, so an interrupted benchmark keeps what it measured;
the markdown table is printed at the end. Measured on a freshly started H200 with CODA_AUTOTUNE=0
(run_all.sh's stage: 3 models x 5 modes, 8 steps after 2, the curve, LLaMA and BERT warming up
together): 177 s in the thirteenth session, 205 s in the fourteenth; with coda+compile, the sixth
mode, 204 s in the fifteenth on a machine whose compile caches were warm. torch.compile takes
about a minute per model; with autotuning on, CODA's first run of a model autotunes every GEMM +
epilogue shape (8 configurations each, cached in ~/.cache/coda and reused by coda+compile, the curve
and later runs), and the runs go one at a time: several minutes more. Split the run with --models to
stay under a time limit.

`--tree NAME=PATH` (repeatable) adds, for every CODA mode in --modes, a run of that mode with CODA
imported from PATH (a directory holding a `coda` package: a copy of src/ with a patch applied),
labelled `mode@NAME` (`coda+graph@rows`): it warms up beside the other runs of its model and
takes its rounds in turn with them, so that a change to CODA is timed against main and the peer
in one benchmark, round by round (`paired_ratios`), instead of in two runs on two machine
states. A child records the directory its `coda` came from (`coda_from`).

`--pad-mm always` sets Inductor's `force_shape_pad` in the compiled modes. torch.compile decides
whether to pad a GEMM with a misaligned size by timing both forms while it compiles; beside other
processes' kernels that timing has flipped GPT-2's LM-head weight gradient (vocabulary 50257) to
an `align1` cuBLAS kernel, its step 13-15% slower (docs/benchmarks-log.md, thirty-sixth
session). With `always` the peer gets its padded, fast form every time (forty-eighth session:
`compile+graph` 489.4k tokens/s, the head's transposed copy and nvjet kernel in its profile).

`--smoke` runs on the CPU in float32 with tiny models of the same three families (2 layers, hidden 64,
vocab 512, batch 2 x 32): modes eager and coda, 1 warm-up and 2 timed steps, a 5-step curve, the JSON
and the PNG in a temporary directory unless --json is given (the PNG then goes next to the JSON). CODA
runs its reference backend there, or the Triton interpreter if TRITON_INTERPRET=1 is set (about a
hundred times slower). It exists so that CI catches breakage; its numbers mean nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import functools
import importlib.metadata
import json
import os
import statistics
import sys
import tempfile
import time
import traceback
from collections import defaultdict
from pathlib import Path

import gpu_clock  # benchmarks/, beside this script
import side_by_side
import torch

# appended, not inserted: a tree given in PYTHONPATH (a variant of src/coda) is the one imported
sys.path.append(str(Path(__file__).resolve().parents[1] / "src"))
import coda
from coda.integrations.hf import unpadded_batches
from coda.train import batch as text_batch
from coda.train import learning_rate, load_corpus, moving_average

MODELS = ("gpt2", "llama", "bert", "gemma")
#: what --models runs unless told (the report's models)
DEFAULT_MODELS = ("gpt2", "llama", "bert")
MODES = ("eager", "compile", "liger", "coda", "coda+compile", "eager+graph", "compile+graph", "coda+graph")
#: the modes CODA is compared against (its ratios are over the fastest of them)
PEERS = ("eager", "compile", "liger", "eager+graph", "compile+graph")
SMOKE_MODES = ("eager", "coda")
#: (batch, sequence length) of the benchmark; the smoke test's tiny models take SMOKE_SHAPE.
SHAPES = {"gpt2": (16, 1024), "llama": (8, 2048), "bert": (32, 512), "gemma": (4, 2048)}
SMOKE_SHAPE = (2, 32)
#: the models Liger patches, by its function's name
LIGER_MODELS = {"llama": "apply_liger_kernel_to_llama", "gemma": "apply_liger_kernel_to_gemma"}
LR = 3e-4
SEED = 0
MLM_FRACTION = 0.15
SDPA = {"attn_implementation": "sdpa"}
#: Kernel name -> class, first match wins: CODA's kernels (coda_gemm_<program>, coda_map_<program>)
#: contain "gemm" and cutlass attention kernels "cutlass", so CODA and attention come before GEMM.
KERNEL_CLASSES = (
    ("coda", ("coda_gemm", "coda_map")),
    ("attention", ("flash", "fmha", "attention", "sdpa", "cudnn")),
    ("optimizer", ("adam", "multi_tensor")),
    ("gemm", ("gemm", "cublas", "cutlass", "nvjet", "xmma", "splitk")),
)
CLASSES = ("gemm", "attention", "coda", "optimizer", "other")


# ------------------------------------------------------------------------------------------------
# Models and batches


def build(name: str, tiny: bool, device: torch.device, dtype: torch.dtype,
          seed: int = SEED) -> torch.nn.Module:
    """The randomly initialized HF model (`seed`, so every process builds the same weights), built
    directly on `device` (initializing the 492M-parameter LLaMA on a CPU takes seconds), in `dtype`,
    in training mode, every dropout probability 0."""
    import transformers as tf

    if name == "gpt2":
        size = (dict(n_embd=64, n_layer=2, n_head=4, vocab_size=512, n_positions=64) if tiny else
                dict(n_embd=768, n_layer=12, n_head=12, vocab_size=50257, n_positions=1024))
        cls, config = tf.GPT2LMHeadModel, tf.GPT2Config(**size, resid_pdrop=0.0, embd_pdrop=0.0,
                                                         attn_pdrop=0.0, use_cache=False, **SDPA)
    elif name == "llama":
        size = (dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                     intermediate_size=128, vocab_size=512, max_position_embeddings=64) if tiny else
                dict(hidden_size=2048, num_hidden_layers=8, num_attention_heads=16, num_key_value_heads=4,
                     intermediate_size=5632, vocab_size=32000, max_position_embeddings=2048))
        cls, config = tf.LlamaForCausalLM, tf.LlamaConfig(**size, attention_dropout=0.0, use_cache=False,
                                                                **SDPA)
    elif name == "gemma":
        size = (dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1,
                     head_dim=16, intermediate_size=128, vocab_size=512, max_position_embeddings=64)
                if tiny else
                dict(hidden_size=2048, num_hidden_layers=6, num_attention_heads=8, num_key_value_heads=1,
                     head_dim=256, intermediate_size=16384, vocab_size=32000, max_position_embeddings=2048))
        cls, config = tf.GemmaForCausalLM, tf.GemmaConfig(**size, attention_dropout=0.0, use_cache=False,
                                                                **SDPA)
    else:
        size = (dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256,
                     vocab_size=512, max_position_embeddings=64) if tiny else
                dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
                     vocab_size=30522, max_position_embeddings=512))
        cls, config = tf.BertForMaskedLM, tf.BertConfig(**size, hidden_dropout_prob=0.0,
                                                        attention_probs_dropout_prob=0.0, **SDPA)
    torch.manual_seed(seed)
    with device:
        model = cls(config)
    return model.to(device=device, dtype=dtype).train()


def model_inputs(name: str, ids: torch.Tensor, vocab: int, generator: torch.Generator,
                 device: torch.device) -> dict[str, torch.Tensor]:
    """The forward's keyword arguments for token ids [B, S] on the CPU. Causal LMs: labels = ids (HF
    shifts them). BERT: MLM_FRACTION of the positions, drawn from `generator`, get their token as the
    label and the id vocab - 1 as input (a [MASK] stand-in, never a byte); the others get label -100."""
    if name != "bert":
        return {"input_ids": ids.to(device), "labels": ids.to(device)}
    masked = torch.rand(ids.shape, generator=generator) < MLM_FRACTION
    return {"input_ids": ids.masked_fill(masked, vocab - 1).to(device),
            "labels": ids.masked_fill(~masked, -100).to(device)}


def prepare(model: torch.nn.Module, mode: str) -> torch.nn.Module:
    """Apply `mode` to `model` in place; returns what the training step calls."""
    if mode == "liger":
        import liger_kernel.transformers

        family = type(model).__name__.removesuffix("ForCausalLM").lower()
        getattr(liger_kernel.transformers, LIGER_MODELS[family])(model=model)
    if mode.startswith("coda"):
        coda.patch(model)
    return torch.compile(model) if compiles(mode) else model


def compiles(mode: str) -> bool:
    """Whether `mode` runs the model through torch.compile (compile, coda+compile, compile+graph)."""
    return mode.removesuffix("+graph").endswith("compile")


# ------------------------------------------------------------------------------------------------
# One run (in a child process)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(name: str, mode: str, args: argparse.Namespace, device: torch.device,
            dtype: torch.dtype) -> dict:
    """Warm up, time `args.steps` training steps, then profile one if `mode` is in `args.profile`."""
    cuda = device.type == "cuda"
    graphed = cuda and mode.endswith("+graph")
    model = build(name, args.smoke, device, dtype)
    step_model = prepare(model, mode)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, fused=cuda, capturable=graphed)
    batch_size, seq = SMOKE_SHAPE if args.smoke else SHAPES[name]
    generator = torch.Generator().manual_seed(SEED)
    vocab = model.config.vocab_size
    inputs = model_inputs(name, torch.randint(vocab, (batch_size, seq), generator=generator), vocab,
                          generator, device)

    def train_step(**batch: torch.Tensor) -> torch.Tensor:
        loss = step_model(**batch).loss
        loss.backward()
        optimizer.step()
        return loss

    def step() -> torch.Tensor:
        loss = train_step(**inputs)
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    if graphed:   # the peak counts the capture: the graph's memory pool holds the step's tensors
        torch.cuda.reset_peak_memory_stats(device)
        # the whole step as a CUDA graph (coda.capture_step, which a peer can use as well), on
        # batches without padding: transformers then keeps SDPA's fused kernels under capture
        captured = coda.capture_step(train_step, optimizer, warmup=max(args.warmup, 1),
                                     context=unpadded_batches, **inputs)
        losses, step = captured.warmup_losses, functools.partial(captured, **inputs)
    else:
        losses = [step() for _ in range(args.warmup)]
    synchronize(device)
    if cuda and not graphed:
        torch.cuda.reset_peak_memory_stats(device)
    rounds, samples = [], []
    for _ in range(args.rounds):
        if args.wait_turn:
            side_by_side.wait_turn()
            losses.append(step())   # refills the allocator's cache that the wait gave back
            synchronize(device)
        with gpu_clock.Sampler(device) as clocks:
            began, start = time.time(), time.perf_counter()
            losses += [step() for _ in range(args.steps)]
            synchronize(device)
            seconds = time.perf_counter() - start
        rounds.append(dict(tokens_per_s=args.steps * batch_size * seq / seconds,
                           step_ms=1e3 * seconds / args.steps, timed_from=utc(began),
                           timed_to=utc(time.time()), gpu_clock=clocks.summary()))
        samples += clocks.samples
    return dict(batch=batch_size, seq=seq, tokens_per_s=statistics.median(r["tokens_per_s"] for r in rounds),
                step_ms=statistics.median(r["step_ms"] for r in rounds), timed_from=rounds[0]["timed_from"],
                timed_to=rounds[-1]["timed_to"], gpu_clock=gpu_clock.summarize(samples),
                rounds=rounds if args.rounds > 1 else None,
                peak_mem_gb=torch.cuda.max_memory_allocated(device) / 2**30 if cuda else None,
                loss=losses[-1].item(), losses=torch.stack(losses).float().tolist(),
                breakdown=breakdown(step, device) if cuda and mode in args.profile else None)


def utc(seconds: float) -> str:
    """A wall-clock time as run_all.sh's gpu_clocks.log (nvidia-smi dmon, UTC) writes it."""
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).strftime("%Y%m%d %H:%M:%S")


def classify(kernel: str) -> str:
    """The class of a GPU kernel, from its name."""
    name = kernel.lower()
    return next((cls for cls, keys in KERNEL_CLASSES if any(k in name for k in keys)), "other")


def breakdown(step, device: torch.device) -> dict:
    """One step under torch.profiler: its GPU kernel time per class in µs, the total, and the 40
    longest kernels (name cut to 120 characters, class, µs, launches; CODA's are named by program),
    and the number of kernel launches."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        step()
        synchronize(device)
    per_kernel: dict[str, float] = defaultdict(float)
    launches: dict[str, int] = defaultdict(int)
    # GPU kernels only: user annotations on the GPU timeline (Optimizer.step#...) span kernels
    kernels = [event for event in prof.events()
               if event.device_type == DeviceType.CUDA and not event.is_user_annotation]
    for event in kernels:
        per_kernel[event.name] += event.device_time_total
        launches[event.name] += 1
    per_class = dict.fromkeys(CLASSES, 0.0)
    for kernel, us in per_kernel.items():
        per_class[classify(kernel)] += us
    top = sorted(per_kernel.items(), key=lambda item: -item[1])[:40]
    idle_after = idle_time(kernels)
    return {**per_class, "total": sum(per_class.values()),
            "launches": sum(launches.values()), "idle": sum(idle_after.values()),
            "top": [[kernel[:120], classify(kernel), us, launches[kernel]] for kernel, us in top],
            "idle_after": [[kernel[:120], us] for kernel, us in
                           sorted(idle_after.items(), key=lambda item: -item[1])[:15]]}


def idle_time(kernels: list) -> dict[str, float]:
    """The GPU's idle µs between the first kernel's start and the last one's end, by the kernel
    that ran last before each idle stretch (a graph's launch gaps, or a wait on the host)."""
    idle_after: dict[str, float] = defaultdict(float)
    spans = sorted((k.time_range.start, k.time_range.end, k.name) for k in kernels)
    busy_until, last = (spans[0][1], spans[0][2]) if spans else (0, "")
    for start, end, name in spans[1:]:
        if start > busy_until:
            idle_after[last] += start - busy_until
        if end >= busy_until:
            busy_until, last = end, name
    return idle_after


def curve(name: str, args: argparse.Namespace, device: torch.device, dtype: torch.dtype) -> dict:
    """Train `name` eager, eager with math attention and with CODA on the KJV bytes: identical
    init (seed) and batches."""
    data = load_corpus()
    batch_size, seq = SMOKE_SHAPE if args.smoke else SHAPES[name]
    losses, seconds = {}, {}
    for mode in ("eager", "eager_math_attention", "coda"):
        start = time.perf_counter()
        losses[mode] = curve_losses(name, mode.removesuffix("_math_attention"), args.curve_steps, data,
                                    device, dtype, args.smoke, math=mode == "eager_math_attention")
        seconds[mode] = time.perf_counter() - start
    return dict(model=name, batch=batch_size, seq=seq, steps=args.curve_steps, lr=LR, losses=losses,
                train_seconds=seconds)


def curve_losses(name: str, mode: str, steps: int, data: torch.Tensor, device: torch.device,
                 dtype: torch.dtype, smoke: bool = False, math: bool = False,
                 seed: int = SEED, schedule_steps: int | None = None) -> list[float]:
    """The losses of `steps` training steps of `name` in `mode` on the KJV bytes, from the
    weights and batches of `seed`, the learning rate warmed up and decayed over `schedule_steps`
    (default `steps`: fewer are the start of that run); with `math`, every attention on
    PyTorch's math kernel (deterministic)."""
    from contextlib import nullcontext

    from torch.nn.attention import SDPBackend, sdpa_kernel

    batch_size, seq = SMOKE_SHAPE if smoke else SHAPES[name]
    model = build(name, smoke, device, dtype, seed)
    step_model = prepare(model, mode)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, fused=device.type == "cuda")
    generator = torch.Generator().manual_seed(seed)
    run = []
    for i in range(steps):
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(i, schedule_steps or steps, LR)
        ids, _ = text_batch(data, batch_size, seq, generator, torch.device("cpu"))
        with sdpa_kernel(SDPBackend.MATH) if math else nullcontext():
            loss = step_model(**model_inputs(name, ids, model.config.vocab_size, generator, device)).loss
            loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        run.append(loss.detach())
    losses = torch.stack(run).float().tolist()
    synchronize(device)
    del model, step_model, optimizer
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return losses


def child(spec: str, args: argparse.Namespace) -> None:
    """Run one (model, mode), or the curve (mode "curve"), and print its result line."""
    name, mode = spec.split(":")
    base = mode.split("@")[0]   # mode@tree: the mode, with CODA from that tree (--tree)
    device = torch.device("cpu" if args.smoke else "cuda")
    dtype = torch.float32 if args.smoke else torch.bfloat16
    result: dict = dict(model=name, mode=mode, device=device_name(device), error=None,
                        coda_from=str(Path(coda.__file__).parent))
    pad_misaligned_gemms(base, args.pad_mm)
    # Under Dynamo transformers 5.17 gives SDPA a full causal mask even without padding (LLaMA's
    # attention then took 27.1 instead of 10.2 ms a step): the compiled modes run where a missing
    # mask means none, as the graph modes capture (these batches have no padding)
    try:
        with unpadded_batches() if compiles(base) else contextlib.nullcontext():
            result.update(curve(name, args, device, dtype) if mode == "curve" else
                          measure(name, base, args, device, dtype))
    except Exception as err:  # torch.OutOfMemoryError included: the row says what went wrong
        traceback.print_exc()
        result["error"] = f"{type(err).__name__}: {err}"[:1000]
    side_by_side.report(result)


def pad_misaligned_gemms(mode: str, pad_mm: str) -> None:
    """--pad-mm always: a compiled mode pads every GEMM with a misaligned size (Inductor's
    `force_shape_pad`), so that torch.compile's GPT-2 step is its fast form in every process."""
    if compiles(mode) and pad_mm == "always":
        import torch._inductor.config as inductor_config

        inductor_config.force_shape_pad = True


def device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


# ------------------------------------------------------------------------------------------------
# The parent: one subprocess per run, then the JSON, the table and the PNG


def start(spec: str, args: argparse.Namespace, wait_turn: bool = False) -> side_by_side.Child:
    """`spec` ("model:mode", or "model:curve") in a subprocess (benchmarks/side_by_side.py). With
    `wait_turn` the child warms up and then waits: the children of one model warm up side by
    side, and their timed steps run one at a time on an otherwise idle GPU and host. A mode
    `mode@NAME` imports CODA from the --tree NAME (first in its PYTHONPATH)."""
    command = [sys.executable, __file__, "--child", spec, "--steps", str(args.steps),
               "--rounds", str(args.rounds), "--warmup", str(args.warmup),
               "--profile", ",".join(args.profile) or "none",
               "--curve-steps", str(args.curve_steps), "--pad-mm", args.pad_mm]
    tree = args.trees.get(spec.partition("@")[2])
    path = os.pathsep.join(p for p in (tree, os.environ.get("PYTHONPATH")) if p)
    env = {"PYTHONPATH": path} if tree else None
    return side_by_side.Child(command + ["--smoke"] * args.smoke + ["--wait-turn"] * wait_turn,
                              args.timeout, env=env)


def first_rounds(runs: list, rounds: int) -> list[list]:
    """The order of the runs in each round but the last (which takes them in their own order):
    each round starts one run further on, so that over `rounds` (a multiple of the runs) each run
    takes each place in a round equally often. A run's place moved its rate by about 1% on an
    H100 (73rd session: the same code, the third of three runs in a round, 0.9% faster than in
    second place, whichever tree it came from)."""
    cycle = max(len(runs), 1)
    shifts = [(r - rounds + 1) % cycle for r in range(rounds - 1)]
    return [runs[shift:] + runs[:shift] for shift in shifts]


def take_turn(spec: str, child: side_by_side.Child) -> dict:
    """The child's row: its result, or an error with the tail of its output."""
    turn = child.take_turn()
    name, mode = spec.split(":")
    row = turn.result or dict(model=name, mode=mode, error=turn.error)
    row["seconds"] = turn.seconds
    if row["error"]:
        row["log"] = turn.log
    return row


def ratios(rows: list[dict]) -> dict:
    """Per model: each CODA mode's tokens/s over the fastest peer's (eager, compile, Liger,
    eager+graph, compile+graph: whichever ran)."""
    out = {}
    for name in dict.fromkeys(r["model"] for r in rows):
        rate = {r["mode"]: r.get("tokens_per_s") for r in rows if r["model"] == name and not r["error"]}
        baselines = {m: rate[m] for m in PEERS if rate.get(m)}
        if not baselines:
            continue
        best = max(baselines, key=baselines.get)
        out[name] = {"baseline": best, **{m: rate[m] / baselines[best] for m in rate
                                          if m.startswith("coda") and rate.get(m)}}
    return out


def paired_ratios(rows: list[dict]) -> dict:
    """Per model, with --rounds: each CODA mode's rate over the fastest peer's (by median) round by
    round: the median, the range and every round's ratio. With CODA_AUTOTUNE=0 a model's runs
    take their rounds in turn, so the two rates of a pair were timed seconds apart and a drift of
    the GPU's clock under its power cap reaches both alike."""
    out = {}
    for name, best in ((name, ratio["baseline"]) for name, ratio in ratios(rows).items()):
        runs = {r["mode"]: r.get("rounds") for r in rows if r["model"] == name and not r["error"]}
        if not runs.get(best):
            continue
        for mode, rounds in runs.items():
            if mode.startswith("coda") and rounds and len(rounds) == len(runs[best]):
                per_round = [ours["tokens_per_s"] / theirs["tokens_per_s"]
                             for ours, theirs in zip(rounds, runs[best], strict=True)]
                out.setdefault(name, {})[mode] = dict(
                    baseline=best, median=statistics.median(per_round), min=min(per_round),
                    max=max(per_round), rounds=per_round)
    return out


def table(rows: list[dict], ratio: dict) -> str:
    """The runs as a markdown table; the breakdown in ms of GPU kernel time per step."""
    head = ["model", "mode", "batch", "tokens/s", "ms/step", "peak GiB", "loss", "GEMM", "attn", "CODA",
            "optim", "other", "vs best peer", "error / note"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for r in rows:
        cells = [r["model"], r["mode"]]
        if r.get("tokens_per_s") is None:
            cells += [""] * (len(head) - 3) + [(r["error"] or r.get("note") or "").replace("\n", " ")[:80]]
        else:
            split, vs = r["breakdown"] or {}, ratio.get(r["model"], {}).get(r["mode"])
            cells += [f"{r['batch']}x{r['seq']}", f"{r['tokens_per_s'] / 1e3:.1f}k", f"{r['step_ms']:.1f}",
                      _num(r["peak_mem_gb"], ".1f"), f"{r['loss']:.4f}",
                      *(_num(split[c] / 1e3 if split else None, ".1f") for c in CLASSES),
                      _num(vs, ".2f") + ("x" if vs else ""), ""]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _num(value: float | None, spec: str) -> str:
    return "" if value is None else format(value, spec)


def plot(result: dict, path: Path) -> None:
    """The loss curves: the raw losses faint, a 10-step moving average on top."""
    from matplotlib.figure import Figure  # Agg: a Figure needs no display

    fig = Figure(figsize=(7, 4), dpi=120)
    ax = fig.subplots()
    # dashed and dotted on top: the curves nearly coincide
    styles = (("tab:blue", "-"), ("tab:green", ":"), ("tab:orange", "--"))
    for (mode, losses), (color, style) in zip(result["losses"].items(), styles, strict=True):
        steps = range(1, len(losses) + 1)
        ax.plot(steps, losses, color=color, alpha=0.25, linewidth=0.8)
        ax.plot(steps, moving_average(losses, 10), style, color=color,
                label=f"{mode} (last {losses[-1]:.3f})")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats per byte)")
    ax.set_title(f"HF {result['model']}, random init, KJV bytes, batch {result['batch']}x{result['seq']}, "
                 f"{result['device']}", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)


def versions() -> dict:
    import transformers
    import triton

    try:
        liger = importlib.metadata.version("liger-kernel")
    except importlib.metadata.PackageNotFoundError:
        liger = None
    return dict(torch=torch.__version__, triton=triton.__version__, transformers=transformers.__version__,
                coda=coda.__version__, liger_kernel=liger)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(DEFAULT_MODELS),
                        help=f"comma-separated, of {','.join(MODELS)}; models joined by + warm up together")
    parser.add_argument("--modes", default=None,
                        help=f"comma-separated, of {','.join(MODES)} (default: all; --smoke: eager,coda)")
    parser.add_argument("--steps", type=int, default=None, help="timed steps (default 20; --smoke: 2)")
    parser.add_argument("--warmup", type=int, default=None, help="warm-up steps (default 5; --smoke: 1)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="times each run's --steps are timed, a model's runs in turn (rate: the median)")
    parser.add_argument("--profile", default="eager,coda",
                        help="modes that get one profiled step (GPU only; 'none' for none)")
    parser.add_argument("--curve", choices=(*MODELS, "none"), default="gpt2", help="loss-curve model")
    parser.add_argument("--curve-steps", type=int, default=None, help="default 200; --smoke: 5")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per child process")
    parser.add_argument("--json", type=Path, default=None,
                        help="default benchmarks/results/train.json; --smoke: a temporary directory")
    parser.add_argument("--tree", action="append", default=[], metavar="NAME=PATH",
                        help="also run each CODA mode with CODA imported from PATH, as mode@NAME")
    parser.add_argument("--pad-mm", choices=("timed", "always"), default="timed",
                        help="torch.compile's padding of GEMMs with misaligned sizes: Inductor's own "
                             "choice, timed while it compiles (GPT-2's step comes out two ways), or "
                             "always (force_shape_pad: the fast form of GPT-2's LM head)")
    parser.add_argument("--smoke", action="store_true", help="tiny models on the CPU, for CI")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # "model:mode": run it, print one line
    parser.add_argument("--wait-turn", action="store_true", help=argparse.SUPPRESS)  # see start
    args = parser.parse_args(argv)
    args.groups = [[m for m in group.split("+") if m] for group in args.models.split(",") if group]
    args.models = [m for group in args.groups for m in group]
    args.modes = [m for m in (args.modes or ",".join(SMOKE_MODES if args.smoke else MODES)).split(",") if m]
    args.profile = [m for m in args.profile.split(",") if m and m != "none"]
    for value, known in ((args.models, MODELS), (args.modes, MODES), (args.profile, MODES)):
        unknown = set(value) - set(known)
        if unknown:
            parser.error(f"unknown {', '.join(sorted(unknown))}; known: {', '.join(known)}")
    args.steps = args.steps if args.steps is not None else 2 if args.smoke else 20
    args.warmup = args.warmup if args.warmup is not None else 1 if args.smoke else 5
    args.curve_steps = args.curve_steps if args.curve_steps is not None else 5 if args.smoke else 200
    args.trees = {}
    for tree in args.tree:
        name, _, path = tree.partition("=")
        if not name or any(c in name for c in ",:@+") or not (Path(path) / "coda" / "__init__.py").is_file():
            parser.error(f"--tree {tree}: give NAME=PATH, a name without , : @ + and a directory "
                         "holding a coda package (a copy of src/)")
        args.trees[name] = str(Path(path).resolve())
    if args.steps < 1 or args.rounds < 1 or args.warmup < 0 or args.curve_steps < 1:
        parser.error("--steps, --rounds and --curve-steps must be positive, --warmup not negative")
    if args.json is None:
        args.json = (Path(tempfile.mkdtemp(prefix="coda_train_")) / "train.json" if args.smoke
                     else Path("benchmarks/results/train.json"))
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        child(args.child, args)
        return 0
    if not args.smoke and not torch.cuda.is_available():
        print("benchmarks/train.py needs a CUDA GPU (or --smoke, which runs on the CPU)", file=sys.stderr)
        return 2
    result = dict(gpu=None, **versions(), dtype="float32" if args.smoke else "bfloat16",
                  date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                  command="python " + " ".join(sys.argv), steps=args.steps, warmup=args.warmup,
                  rows=[], ratios={}, curve=None)

    def save() -> None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1))

    # The curve runs while the first model's children warm up; it ends before any timed step.
    curve_child = start(f"{args.curve}:curve", args) if args.curve != "none" else None
    # CODA's autotuning times kernels: it must not share the GPU with other warm-ups
    together = not side_by_side.autotuning()
    # each CODA mode once more for every --tree, with CODA from that tree
    modes = args.modes + [f"{mode}@{tree}" for tree in args.trees for mode in args.modes
                          if mode.startswith("coda")]
    for names in args.groups:
        runs = [f"{name}:{mode}" for name in names for mode in modes
                if mode != "liger" or name in LIGER_MODELS]
        group = {spec: start(spec, args, wait_turn=True) for spec in runs if together}
        if curve_child is not None:
            record_curve(take_turn(f"{args.curve}:curve", curve_child), result, args, save)
            curve_child = None
        side_by_side.wait_ready(group.values())
        for order in first_rounds(list(group.values()), args.rounds):
            for run in order:
                run.take_round()
        for name, mode in ((name, mode) for name in names for mode in modes):
            spec = f"{name}:{mode}"
            if spec not in runs:
                row = dict(model=name, mode=mode, error=None,
                           note=f"skipped: Liger Kernel has no {name} support")
            else:
                run = group.get(spec)
                if run is None:   # alone: its rounds back to back
                    run = start(spec, args, True)
                    for _ in range(args.rounds - 1):
                        run.take_round()
                row = take_turn(spec, run)
                result["gpu"] = result["gpu"] or row.get("device")
            result["rows"].append(row)
            result["ratios"] = ratios(result["rows"])
            result["paired_ratios"] = paired_ratios(result["rows"])
            save()
            print(f"{name:>5} {mode:<12} " + (f"{row['tokens_per_s'] / 1e3:8.1f}k tokens/s" if
                  row.get("tokens_per_s") else row["error"] or row["note"])
                  + (f"  ({row['seconds']:.0f} s)" if "seconds" in row else "")
                  + (f"  {clock['sm_clock_mhz_mean']:.0f} MHz, {clock['power_w_mean']:.0f} W"
                     if (clock := row.get("gpu_clock")) else ""), flush=True)
    if curve_child is not None:   # no models
        record_curve(take_turn(f"{args.curve}:curve", curve_child), result, args, save)
    print()
    print(table(result["rows"], result["ratios"]))
    for name, modes in result.get("paired_ratios", {}).items():
        for mode, paired in modes.items():
            print(f"{name} {mode} / {paired['baseline']}, round by round: median {paired['median']:.3f}x, "
                  f"{paired['min']:.3f}-{paired['max']:.3f}x over {len(paired['rounds'])} rounds")
    print(f"\nwrote {args.json}")
    return 0


def record_curve(curve: dict, result: dict, args: argparse.Namespace, save) -> None:
    """The loss curve's result into the JSON, its PNG, and a line of output."""
    result["curve"] = curve
    result["gpu"] = result["gpu"] or curve.get("device")
    if not curve["error"]:
        png = (args.json.parent if args.smoke else Path("docs/img")) / f"train_loss_{args.curve}.png"
        plot(curve, png)
        curve["png"] = str(png)
    save()
    print(f"curve {args.curve}: " + (curve["error"] or ", ".join(
        f"{mode} last loss {losses[-1]:.4f} ({curve['train_seconds'][mode]:.0f} s)"
        for mode, losses in curve["losses"].items()) + f"; {curve['png']}"), flush=True)


if __name__ == "__main__":
    sys.exit(main())
