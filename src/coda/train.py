"""`coda train`: train a byte-level GPT-2 on the King James Bible with CODA's fused operators.

    coda train [--preset tiny|small|gpt2] [--steps N] [--batch-size B] [--lr LR] [--seed S]
               [--device cpu|cuda] [--dtype float32|bfloat16] [--out loss.png] [--compare]
               [--sample N]
    python -m coda.train ...            (the same)

The corpus (src/coda/data/kjv.txt.gz, 4.4 MB of text, see src/coda/data/README.md) is read as
bytes (vocabulary 256); its first 90% trains, the last 10% is held out. The model is
`coda.nn.GPT`: every layer but attention runs as CODA programs, forward and backward. Each step
takes a batch of random windows (a seeded generator: the same data order for every run with one
seed), AdamW as in nanoGPT (betas 0.9, 0.95; weight decay 0.1 on the matrices), warmup and cosine
decay, gradient clipping at 1.0.

On a CPU the defaults are the "tiny" preset in float32 on the reference backend (CODA's programs
evaluated by eager PyTorch): about a minute on two cores. The Triton interpreter is not switched
on (it would take hours); if TRITON_INTERPRET=1 is already set, it is used, and said so. On a GPU:
the "small" preset in bfloat16 (float32 master weights) on the Triton kernels. `--compare` trains
the same model again in eager PyTorch (same initialization, same batches) and prints both.

At the end: the held-out loss, a short sample of generated text, and a PNG of the loss curves.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import math
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import torch

from .errors import CodaError
from .nn import GPT, PRESETS
from .runtime.program import interpreter_enabled

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


@dataclass(frozen=True)
class Recipe:
    """The default training run of a preset."""

    steps: int
    batch_size: int
    lr: float


RECIPES = {"tiny": Recipe(steps=1500, batch_size=16, lr=2e-3),
           "small": Recipe(steps=1000, batch_size=64, lr=1e-3),
           "gpt2": Recipe(steps=500, batch_size=16, lr=6e-4)}
#: Batches (of the run's batch size) averaged for the held-out loss.
EVAL_BATCHES = 20
#: The exit code after Ctrl-C (128 + SIGINT, as shells report a process that SIGINT ended).
INTERRUPTED = 130


# ------------------------------------------------------------------------------------------------
# Data


def load_corpus() -> torch.Tensor:
    """The King James Bible as a uint8 tensor of its bytes."""
    data = resources.files("coda").joinpath("data", "kjv.txt.gz").read_bytes()
    return torch.frombuffer(bytearray(gzip.decompress(data)), dtype=torch.uint8)


def batch(data: torch.Tensor, batch_size: int, block: int, generator: torch.Generator,
          device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """`batch_size` random windows of data: inputs [B, block] and the next bytes, the targets."""
    start = torch.randint(len(data) - block, (batch_size, 1), generator=generator)
    windows = data[start + torch.arange(block + 1)].long()
    if device.type == "cuda":   # a pinned, non-blocking copy: the CPU need not wait for the GPU
        windows = windows.pin_memory()
    windows = windows.to(device, non_blocking=True)
    return windows[:, :-1], windows[:, 1:]


# ------------------------------------------------------------------------------------------------
# Training


@dataclass
class Run:
    """What one training run measured."""

    label: str
    losses: list[float] = field(default_factory=list)
    tokens_per_s: float = math.nan
    held_out: float = math.nan

    @property
    def final_loss(self) -> float:
        """The mean training loss of the last 5% of the steps (at least one)."""
        tail = self.losses[-max(1, len(self.losses) // 20):]
        return sum(tail) / len(tail)


def learning_rate(step: int, steps: int, peak: float) -> float:
    """Linear warmup over the first 5% of the steps, then cosine decay to peak / 10."""
    warmup = max(1, steps // 20)
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return peak * (0.1 + 0.45 * (1.0 + math.cos(math.pi * progress)))


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train(model: GPT, data: torch.Tensor, label: str, steps: int, batch_size: int, lr: float,
          seed: int, device: torch.device) -> Run:
    """Train `model` for `steps` steps, showing a one-line progress display; returns the losses
    and the throughput (tokens per second after the first 10% of the steps, which include the
    kernels' compilation)."""
    block = model.config.block_size
    generator = torch.Generator().manual_seed(seed)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}]
    optimizer = torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), fused=device.type == "cuda")
    run, pending = Run(label), []
    timed_from = steps // 10
    tokens = batch_size * block
    interactive = sys.stdout.isatty()   # a terminal: one line rewritten; a log: a line per 10%
    report_every = max(1, steps // (100 if interactive else 10))
    start = last = time.perf_counter()
    for step in range(steps):
        if step == timed_from:
            synchronize(device)
            start = time.perf_counter()
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, steps, lr)
        x, y = batch(data, batch_size, block, generator, device)
        loss = model(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        pending.append(loss.detach())
        if (step + 1) % report_every == 0 or step + 1 == steps:
            run.losses += torch.stack(pending).float().tolist()   # waits for the device
            now = time.perf_counter()
            rate = len(pending) * tokens / (now - last)
            pending, last = [], now
            show_progress(label, step + 1, steps, run.losses[-1], rate, interactive)
            check_finite(run.losses, label, interactive)
    synchronize(device)
    run.tokens_per_s = (steps - timed_from) * tokens / (time.perf_counter() - start)
    if interactive:
        print()
    return run


def check_finite(losses: Sequence[float], label: str, interactive: bool) -> None:
    """Stop at a loss that is not finite: the weights are then NaN for good, and the run would
    go on to its last step only to end in torch.multinomial's error while sampling."""
    if math.isfinite(losses[-1]):
        return
    step = next(i for i, loss in enumerate(losses, 1) if not math.isfinite(loss))
    if interactive:   # end the progress line first
        print()
    raise CodaError(f"{label}: the training diverged (loss {losses[step - 1]} at step {step}); "
                    f"try a smaller --lr")


def show_progress(label: str, step: int, steps: int, loss: float, rate: float, interactive: bool) -> None:
    """A bar, the step, the last loss and tokens per second: one line rewritten in place on a
    terminal, a new line each time otherwise."""
    width = 24
    filled = width * step // steps
    line = (f"{label:>5} [{'#' * filled}{'.' * (width - filled)}] step {step}/{steps}  "
            f"loss {loss:.3f}  {rate / 1000:.1f}k tok/s")
    print(f"\r{line} " if interactive else line, end="" if interactive else "\n", flush=True)


@torch.no_grad()
def evaluate(model: GPT, data: torch.Tensor, batch_size: int, seed: int, device: torch.device) -> float:
    """The mean loss over EVAL_BATCHES random batches of `data` (the same batches for every model
    with one seed)."""
    generator = torch.Generator().manual_seed(seed + 1)
    losses = [model(*batch(data, batch_size, model.config.block_size, generator, device))
              for _ in range(EVAL_BATCHES)]
    return torch.stack(losses).mean().item()


def sample(model: GPT, text: torch.Tensor, new_tokens: int, seed: int, device: torch.device
           ) -> tuple[str, str]:
    """The model's continuation (`new_tokens` bytes, top-k 40) of the first whole lines of
    `text` that fill its context: (the prompt's last line, the continuation). A full context
    keeps one shape for every step (one set of kernel configurations on a GPU)."""
    start = bytes(text[:1000].tolist()).index(b"\n") + 1
    prompt = text[start:start + model.config.block_size].long().to(device)[None]
    generator = torch.Generator(device).manual_seed(seed)
    out = model.generate(prompt, new_tokens, top_k=40, generator=generator)[0].tolist()
    context, continuation = bytes(out[:prompt.shape[1]]), bytes(out[prompt.shape[1]:])
    return printable(context.split(b"\n")[-1]), printable(continuation)


def printable(text: bytes) -> str:
    """`text` as printable ASCII: newlines kept, every other control byte and every byte past
    ASCII (a barely trained model emits them) as a \\xNN escape, which any terminal encoding can
    show and none acts on."""
    return "".join(c if c == "\n" or " " <= c <= "~" else f"\\x{ord(c):02x}" for c in text.decode("latin-1"))


def moving_average(values: Sequence[float], window: int) -> list[float]:
    """The mean of each value and the up to `window - 1` values before it."""
    sums = [0.0]
    for v in values:
        sums.append(sums[-1] + v)
    return [(sums[i + 1] - sums[max(0, i + 1 - window)]) / min(i + 1, window) for i in range(len(values))]


def plot(runs: Sequence[Run], path: Path, title: str) -> None:
    """The loss curves (a 20-step moving average over the raw losses) and held-out losses, as a PNG."""
    from matplotlib.figure import Figure  # imported only here: the rest of the CLI does not need it

    fig = Figure(figsize=(7, 4), dpi=120)
    ax = fig.subplots()
    for run, color, style in zip(runs, ("tab:blue", "tab:orange"), ("-", "--"), strict=False):
        steps = range(1, len(run.losses) + 1)
        ax.plot(steps, run.losses, color=color, alpha=0.25, linewidth=0.8)
        ax.plot(steps, moving_average(run.losses, 20), style, color=color,
                label=f"{run.label} train ({run.final_loss:.3f})")
        ax.plot([len(run.losses)], [run.held_out], "*", color=color, markersize=10,
                label=f"{run.label} held-out ({run.held_out:.3f})")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats per byte)")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")   # exactly `path`: no ".png" appended, no format from its suffix


# ------------------------------------------------------------------------------------------------
# Command line


def positive(kind: type, zero: bool = False) -> Callable[[str], int | float]:
    """An argparse type: a number of `kind` above zero (0 must not silently mean "the preset's",
    and AdamW rejects a negative learning rate only after the model is built), or, with `zero`,
    at least zero (`--sample -5` must not silently mean "none")."""
    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or not (value >= 0 if zero else value > 0) or not math.isfinite(value):
            what = "non-negative" if zero else "positive"
            raise argparse.ArgumentTypeError(f"expected a {what} {kind.__name__}, got {text!r}")
        return value
    return parse


#: The seeds `--seed` takes: torch's generators take -2**63 to 2**64 - 1, and `coda train` also
#: seeds one with seed + 1 (its held-out batches).
SEED_LIMIT = 2**63


def parse_seed(text: str) -> int:
    """An argparse type: an integer seed that torch's generators take (beyond them, torch's
    ValueError came as a traceback, for `coda train --seed 2**64 - 1` after the training)."""
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or not -SEED_LIMIT < value < SEED_LIMIT:
        raise argparse.ArgumentTypeError(f"expected an integer seed, |seed| < 2**63, got {text!r}")
    return value


def check_output(path: Path) -> None:
    """Fail before training, not after it, when the loss-curve PNG cannot be written at `path`."""
    if path.is_dir():
        raise CodaError(f"--out {path}: is a directory (give the PNG's file name)")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise CodaError(f"--out {path}: cannot create its folder ({err.strerror or err})") from None
    existed = path.exists()
    try:   # opened, not os.access: that says yes to root whatever the file system allows
        with open(path, "ab"):
            pass
    except OSError as err:
        raise CodaError(f"--out {path}: not writable ({err.strerror or err})") from None
    if not existed:
        path.unlink()
    try:
        from matplotlib.figure import Figure  # noqa: F401  (what `plot` draws with)
    except Exception as err:   # not installed, or a bad MPLBACKEND: a ValueError on import
        raise CodaError(f"--out {path}: matplotlib cannot draw the loss curve ({err})") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--preset", choices=list(PRESETS), default=None,
                        help="model size (default: tiny on a CPU, small on a GPU)")
    parser.add_argument("--steps", type=positive(int), default=None,
                        help="training steps (default: the preset's)")
    parser.add_argument("--batch-size", type=positive(int), default=None,
                        help="sequences per step (default: the preset's)")
    parser.add_argument("--lr", type=positive(float), default=None,
                        help="peak learning rate (default: the preset's)")
    parser.add_argument("--seed", type=parse_seed, default=0,
                        help="seed of the initialization and the data order")
    parser.add_argument("--device", default=None, help="cpu or cuda[:N] (default: cuda if available)")
    parser.add_argument("--dtype", choices=list(DTYPES), default=None,
                        help="compute dtype (default: bfloat16 on a GPU, float32 on a CPU)")
    parser.add_argument("--out", type=Path, default=Path("loss.png"),
                        help="the loss-curve PNG (default: loss.png)")
    parser.add_argument("--compare", action="store_true",
                        help="also train the same model in eager PyTorch and compare")
    parser.add_argument("--sample", type=positive(int, zero=True), default=200, metavar="N",
                        help="bytes of text to generate after training (default: 200; 0: none)")


def backend_note(device: torch.device) -> str:
    if device.type == "cuda":
        return f"Triton kernels on {torch.cuda.get_device_name(device)}"
    if interpreter_enabled():
        return "Triton interpreter (TRITON_INTERPRET=1 is set: very slow; unset it for the reference backend)"
    return "reference backend (CODA's programs evaluated by eager PyTorch)"


#: What the throughput ratio measures, by device (docs/training.md): on a CPU the reference
#: backend's interpretation of each program; on a GPU a step launched from Python, whose host
#: time a CODA launch raises more than a PyTorch kernel does.
THROUGHPUT_NOTE = {
    "cpu": " (the reference backend interprets each program in Python: the CPU path is for "
           "correctness, not speed)",
    "interpreter": " (Triton's interpreter runs each kernel in Python, element by element: the "
                   "CPU path is for correctness, not speed)",
    "cuda": " (launched from Python: at small sizes the host's launch time bounds CODA's step; its "
            "speed shows with the step captured as a CUDA graph, coda.capture_step, docs/training.md)",
}


@contextlib.contextmanager
def memory_of(device: torch.device, what: str) -> Iterator[None]:
    """A CodaError naming `what` for an allocation that fails inside the block (torch raises
    OutOfMemoryError on a GPU, a RuntimeError from its CPU allocator, or MemoryError; a size past
    int64's range, a RuntimeError or TypeError about an overflow)."""
    try:
        yield
    except (RuntimeError, MemoryError, TypeError) as err:
        message = str(err)
        if not (isinstance(err, (MemoryError, torch.OutOfMemoryError)) or "overflow" in message.lower()
                or "can't allocate memory" in message or "out of memory" in message):
            raise
        first = (message.strip().splitlines() or [type(err).__name__])[0]
        raise CodaError(f"{what}: out of memory on {device} ({first}); try a smaller one") from None


def cmd_train(args: argparse.Namespace) -> int:
    default = "cuda" if torch.cuda.is_available() else "cpu"
    try:   # (`--device ''` is an error, not the default)
        device = torch.device(default if args.device is None else args.device)
    except RuntimeError as err:
        raise CodaError(f"--device {args.device}: {err}") from None
    if device.type not in ("cpu", "cuda"):   # e.g. meta: the loss has no value to print
        raise CodaError(f"--device {args.device}: expected cpu or cuda[:N]")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise CodaError(f"--device {args.device}: no CUDA GPU is available")
    if device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count():
        raise CodaError(f"--device {args.device}: this machine has {torch.cuda.device_count()} CUDA GPU(s)")
    preset = args.preset or ("small" if device.type == "cuda" else "tiny")
    recipe = RECIPES[preset]
    steps = recipe.steps if args.steps is None else args.steps
    batch_size = recipe.batch_size if args.batch_size is None else args.batch_size
    lr = recipe.lr if args.lr is None else args.lr
    dtype = DTYPES[args.dtype or ("bfloat16" if device.type == "cuda" else "float32")]
    if steps < 1 or batch_size < 1 or not lr > 0:   # callers that bypass the parser's checks
        raise CodaError("--steps, --batch-size and --lr must be positive")
    check_output(args.out)

    corpus = load_corpus()
    split = len(corpus) * 9 // 10
    train_data, held_out = corpus[:split], corpus[split:]
    config = PRESETS[preset]
    torch.manual_seed(args.seed)
    model = GPT(config, compute_dtype=dtype).to(device)
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    print(f"model: GPT preset {preset!r} ({config.n_layer} layers, {config.n_head} heads, "
          f"{config.n_embd} hidden, context {config.block_size}), {model.num_params() / 1e6:.2f}M parameters")
    print(f"data: King James Bible, {len(train_data) / 1e6:.2f}M training bytes, "
          f"{len(held_out) / 1e6:.2f}M held out")
    print(f"run: {steps} steps x {batch_size} x {config.block_size} tokens, lr {lr:g}, "
          f"{str(dtype).removeprefix('torch.')}, "
          f"{device}; CODA: {backend_note(device)}")

    with memory_of(device, f"--batch-size {batch_size}"):
        runs = [train(model, train_data, "CODA", steps, batch_size, lr, args.seed, device)]
        runs[0].held_out = evaluate(model, held_out, batch_size, args.seed, device)
        if args.compare:
            eager = GPT(config, fused=False, compute_dtype=dtype).to(device)
            eager.load_state_dict(initial)
            runs.append(train(eager, train_data, "eager", steps, batch_size, lr, args.seed, device))
            runs[1].held_out = evaluate(eager, held_out, batch_size, args.seed, device)

    for r in runs:
        print(f"{r.label:>5}: final train loss {r.final_loss:.4f}, held-out loss {r.held_out:.4f}, "
              f"{rate(r.tokens_per_s)}")
    if args.compare:
        where = "interpreter" if device.type == "cpu" and interpreter_enabled() else device.type
        print(f"CODA / eager throughput: {runs[0].tokens_per_s / runs[1].tokens_per_s:.3g}x"
              + THROUGHPUT_NOTE.get(where, ""))
    # the plot before the sample: a run's one file is written whatever the sample meets
    plot(runs, args.out, f"GPT {preset} on the KJV, {str(dtype).removeprefix('torch.')}, {device}")
    print(f"loss curve: {args.out}")
    if args.sample > 0:
        prompt, continuation = sample(model, held_out, args.sample, args.seed, device)
        print(f"sample (held-out text, then the model's continuation after '|'):\n{prompt}|{continuation}")
    return 0


def rate(tokens_per_s: float) -> str:
    """A throughput as people read it: thousands where there are thousands, else the number."""
    return f"{tokens_per_s / 1000:.1f}k tokens/s" if tokens_per_s >= 1000 else f"{tokens_per_s:.3g} tokens/s"


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m coda.train ...` is `coda train ...`: the same parser, messages and exit codes."""
    from .cli import main as cli_main  # here: cli imports this module

    return cli_main(["train", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
