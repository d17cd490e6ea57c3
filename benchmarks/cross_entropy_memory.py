"""LM head + cross-entropy, forward + backward: peak memory and time of CODA, eager PyTorch and
Liger's fused linear cross-entropy.

    python benchmarks/cross_entropy_memory.py [--tokens 8192] [--json benchmarks/results/cross_entropy.json]

bf16, tokens x hidden hidden states, a [vocab, hidden] head without bias, mean loss over all rows.
- coda:  coda.ops.linear_cross_entropy (no logits in the forward; [rows, vocab] blocks backward,
         dw accumulated in float32)
- coda_low_memory: the same with low_memory=True (blocks no larger than Liger's chunks, no
         float32 accumulator, one more GEMM)
- eager: F.cross_entropy(x @ w.T, target) (the [tokens, vocab] logits and their gradient in bf16)
- liger: liger_kernel's LigerFusedLinearCrossEntropyLoss, when importable (skipped otherwise)
Peak memory is torch.cuda.max_memory_allocated() during one forward + backward, minus what was
allocated before it (the inputs), so it counts the op's own allocations: gradients included.
Times are medians of `triton.testing.do_bench` over forward + backward.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import sys
from pathlib import Path

import side_by_side  # benchmarks/, beside this script
import torch
import torch.nn.functional as F
import triton.testing

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from coda.ops.cross_entropy import block_shapes, linear_cross_entropy

SHAPES = [(768, 50257), (2048, 32000), (2048, 128256), (4096, 32000), (4096, 128256)]  # (hidden, vocab)


def impls() -> dict:
    """name -> loss(x, w, target)."""
    found = {"coda": lambda x, w, t: linear_cross_entropy(x, w, t),
             "coda_low_memory": lambda x, w, t: linear_cross_entropy(x, w, t, low_memory=True),
             "eager": lambda x, w, t: F.cross_entropy(x @ w.T, t)}
    try:
        from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss
    except ImportError:
        print("liger_kernel is not importable: Liger skipped", flush=True)
    else:
        liger = LigerFusedLinearCrossEntropyLoss()
        found["liger"] = lambda x, w, t: liger(w, x, t)
    return found


def child(tokens: int, hidden: int, vocab: int) -> list[dict]:
    """One shape (in its own process): every implementation's step run once (compilation), the
    turn waited for, then each one's peak memory and time."""
    torch.manual_seed(0)
    x = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16).requires_grad_()
    w = (torch.randn(vocab, hidden, device="cuda") / hidden**0.5).to(torch.bfloat16).requires_grad_()
    target = torch.randint(0, vocab, (tokens,), device="cuda")
    steps, rows = {}, []
    for name, loss_fn in impls().items():
        def step(loss_fn=loss_fn):
            loss = loss_fn(x, w, target)
            return loss.detach(), torch.autograd.grad(loss, [x, w])
        try:
            steps[name] = step, step()[0].item()   # compile, tune (the gradients are dropped at once)
        except torch.cuda.OutOfMemoryError:
            rows.append(dict(impl=name, error="out of memory"))
        torch.cuda.empty_cache()
    side_by_side.wait_turn()
    for name, (step, loss) in steps.items():
        step()   # refills the allocator's cache the wait gave back
        torch.cuda.synchronize()
        gc.collect()   # what earlier runs left in reference cycles would be freed mid-measurement
        torch.cuda.empty_cache()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        step()
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - base
        rows.append(dict(impl=name, loss=loss, peak_mib=peak / 2**20, ms=triton.testing.do_bench(step)))
    for row in rows:
        row.update(tokens=tokens, hidden=hidden, vocab=vocab)
        if row["impl"].startswith("coda"):
            row["chunk_size"], row["row_block"] = block_shapes(
                tokens, hidden, vocab, None, low_memory=row["impl"] == "coda_low_memory")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=8192)
    parser.add_argument("--json", default="benchmarks/results/cross_entropy.json")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per shape's process")
    parser.add_argument("--child", help=argparse.SUPPRESS)   # "hidden:vocab": report its rows
    args = parser.parse_args()
    if args.child:
        return side_by_side.report(child(args.tokens, *map(int, args.child.split(":"))))
    side_by_side.require_gpu(f"benchmarks/{Path(__file__).name}")
    # each shape in its own process, all warming up side by side, then measured one at a time
    commands = [[sys.executable, __file__, "--child", f"{hidden}:{vocab}", "--tokens", str(args.tokens)]
                for hidden, vocab in SHAPES]
    rows = []
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    for (hidden, vocab), turn in zip(SHAPES, side_by_side.turns(commands, len(SHAPES), args.timeout),
                                     strict=True):
        if turn.result is None:
            print(turn.log, file=sys.stderr, flush=True)
        for row in turn.result or [dict(impl="all", tokens=args.tokens, hidden=hidden, vocab=vocab,
                                        error=turn.error)]:
            shown = (f"peak {row['peak_mib']:9.1f} MiB  {row['ms']:8.3f} ms  loss {row['loss']:.5f}"
                     if "ms" in row else row["error"])
            print(f"{args.tokens}x{hidden}x{vocab:<7d} {row['impl']:15s} {shown}", flush=True)
            rows.append(row)
        # after every shape: a run cut short by run_all.sh's time limit keeps what it measured
        Path(args.json).write_text(json.dumps(dict(
            gpu=torch.cuda.get_device_name(), torch=torch.__version__,
            date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            rows=rows), indent=1))


if __name__ == "__main__":
    main()
