"""Data-parallel training of coda.nn.GPT under PyTorch DDP or FSDP2, for multi-GPU throughput runs.

    torchrun --nproc_per_node N benchmarks/train_distributed.py --mode ddp|fsdp \
        --model coda|eager|compile [--preset small|gpt2] [--steps 100] [--batch-size 16] \
        [--device cuda|cpu] [--out result.json]

--model: `coda` runs the GPT's layers as CODA programs (fused=True), `eager` the same parameters
through torch.nn.functional (fused=False), `compile` the eager model under torch.compile
(Inductor): the baselines. --mode: `ddp` wraps the model in DistributedDataParallel (gradients
all-reduced and averaged); `fsdp` applies FSDP2's `fully_shard` to every block and to the root
(parameters, gradients and AdamW state sharded; a block's parameters all-gathered in the compute
dtype, gradients reduce-scattered in float32).

On GPUs: NCCL, bfloat16 compute with float32 master weights (DDP: the model casts each weight on
use; FSDP2: MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32)). With --device cpu:
gloo and float32, for a smoke test (`--steps 2`; CODA's reference backend unless TRITON_INTERPRET=1).

Each rank trains on its own random windows of the King James Bible (coda.train's corpus and
batches, generator seeded with seed + rank); the model is initialized identically on every rank
(seed). The optimizer and schedule are coda.train's: AdamW (0.9, 0.95), weight decay 0.1 on the
matrices, warmup + cosine, gradient clipping at 1.0. Rank 0 prints (and writes to --out) a JSON
object: the configuration, tokens/s per GPU (after the first 10% of the steps, which include
compilation), peak memory per GPU (GiB, rank 0), and the loss curve (the mean over ranks per step).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.nn.parallel import DistributedDataParallel

from coda.nn import GPT, PRESETS
from coda.train import batch, learning_rate, load_corpus


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=("ddp", "fsdp"), required=True)
    parser.add_argument("--model", choices=("coda", "eager", "compile"), required=True)
    parser.add_argument("--preset", choices=tuple(PRESETS), default="small")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=16, help="sequences per GPU per step")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=1337)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--out", type=Path, help="also write the JSON result here (rank 0)")
    return parser.parse_args(argv)


def build(args: argparse.Namespace, device: torch.device, dtype: torch.dtype) -> torch.nn.Module:
    """The GPT, identical on every rank, wrapped for --mode."""
    torch.manual_seed(args.seed)
    fsdp = args.mode == "fsdp"
    # FSDP2 casts the gathered parameters itself; DDP keeps float32 parameters and the model
    # casts each weight on use.
    model = GPT(PRESETS[args.preset], fused=args.model == "coda",
                compute_dtype=None if fsdp or dtype == torch.float32 else dtype).to(device)
    if fsdp:
        policy = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)
        for block in model.blocks:
            fully_shard(block, mp_policy=policy)
        fully_shard(model, mp_policy=policy)
    else:
        model = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    if args.model == "compile":
        model = torch.compile(model)
    return model


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if args.device == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device)
        dtype = torch.bfloat16
    else:
        device, dtype = torch.device("cpu"), torch.float32
        dist.init_process_group("gloo")
    try:
        model = build(args, device, dtype)
        params = list(model.parameters())
        groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
                  {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
        optimizer = torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.95), fused=device.type == "cuda")
        data = load_corpus()
        block = PRESETS[args.preset].block_size
        generator = torch.Generator().manual_seed(args.seed + rank)   # each rank its own windows
        losses, timed_from = [], args.steps // 10
        start = time.perf_counter()
        for step in range(args.steps):
            if step == timed_from:
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                start = time.perf_counter()
            for group in optimizer.param_groups:
                group["lr"] = learning_rate(step, args.steps, args.lr)
            x, y = batch(data, args.batch_size, block, generator, device)
            loss = model(x, y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            losses.append(loss.detach().float())
        curve = torch.stack(losses)
        dist.all_reduce(curve)            # waits for the last step on every rank
        elapsed = time.perf_counter() - start
        tokens = (args.steps - timed_from) * args.batch_size * block
        result = {
            "mode": args.mode, "model": args.model, "preset": args.preset, "world_size": world,
            "device": args.device, "dtype": str(dtype).removeprefix("torch."),
            "batch_size_per_gpu": args.batch_size, "seq_len": block, "steps": args.steps,
            "tokens_per_s_per_gpu": tokens / elapsed,
            "peak_memory_gib": (torch.cuda.max_memory_allocated(device) / 2**30
                                if device.type == "cuda" else None),
            "losses": (curve / world).tolist(),
        }
        if rank == 0:
            text = json.dumps(result)
            print(text)
            if args.out is not None:
                args.out.write_text(text + "\n")
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
