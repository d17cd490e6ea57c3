"""Data-parallel training under PyTorch DDP or FSDP2, for multi-GPU throughput runs: coda.nn.GPT,
or HuggingFace's LlamaForCausalLM (the LLaMA-style model of docs/benchmarks.md) with CODA patched in.

    torchrun --nproc_per_node N benchmarks/train_distributed.py --mode ddp|fsdp \
        --model coda|eager|compile [--arch gpt|llama] [--preset small|gpt2|llama|tiny] \
        [--steps 100] [--batch-size 16] [--device cuda|cpu] [--out result.json]

--model: `coda` runs the layers as CODA programs (GPT: fused=True; LLaMA: `coda.patch`), `eager`
the same parameters through PyTorch / HF as is, `compile` the eager model under torch.compile
(Inductor): the baselines. --mode: `ddp` wraps the model in DistributedDataParallel (gradients
all-reduced and averaged); `fsdp` applies FSDP2's `fully_shard` to every block and to the root
(parameters, gradients and AdamW state sharded; a block's parameters all-gathered in the compute
dtype, gradients reduce-scattered in float32).

On GPUs: NCCL, bfloat16 compute with float32 master weights (DDP: the GPT casts each weight on
use, the LLaMA is trained in bfloat16 weights as in benchmarks/train.py; FSDP2:
MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32)). With --device cpu: gloo and
float32, for a smoke test (`--steps 2`; CODA's reference backend unless TRITON_INTERPRET=1).
The same global batch on one GPU is `--nproc_per_node 1` with N times the batch size.

Every step draws one global batch of world × batch-size random windows of the King James Bible
(coda.train's corpus and batches, one generator seeded with seed) and each rank trains on its slice,
so a run on one GPU with the whole global batch sees the same data; the model is initialized
identically on every rank (seed). The optimizer and schedule are coda.train's: AdamW (0.9, 0.95),
weight decay 0.1 on the matrices, warmup + cosine, gradient clipping at 1.0. Rank 0 prints (and
writes to --out) a JSON object: the configuration, tokens/s per GPU (after the first 10% of the
steps, which include compilation), peak memory per GPU (GiB, rank 0), and the loss curve (the mean
over ranks per step).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.nn.parallel import DistributedDataParallel

import coda
from coda.nn import GPT, PRESETS
from coda.train import batch, learning_rate, load_corpus

#: HF LlamaConfig fields and sequence length: `llama` is the 492M model of the benchmarks (hidden
#: 2048, 8 layers, 16 heads / 4 KV heads, ffn 5632, vocab 32000), `tiny` a CPU smoke-test size.
LLAMA_PRESETS = {
    "llama": (dict(hidden_size=2048, num_hidden_layers=8, num_attention_heads=16, num_key_value_heads=4,
                   intermediate_size=5632, vocab_size=32000), 2048),
    "tiny": (dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                  intermediate_size=96, vocab_size=256), 64),
}


class CausalLM(torch.nn.Module):
    """A HuggingFace causal LM called as the GPT is: model(x, y) -> the mean cross-entropy of
    predicting y (already shifted: the next bytes)."""

    def __init__(self, hf: torch.nn.Module):
        super().__init__()
        self.hf = hf

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        # HF shifts labels itself; give it `shift_labels` so that x predicts y as in coda.train
        y = y.contiguous()   # HF views the labels flat
        return self.hf(input_ids=x, labels=y, shift_labels=y).loss


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=("ddp", "fsdp"), required=True)
    parser.add_argument("--model", choices=("coda", "eager", "compile"), required=True)
    parser.add_argument("--arch", choices=("gpt", "llama"), default="gpt")
    parser.add_argument("--preset", choices=tuple(dict.fromkeys((*PRESETS, *LLAMA_PRESETS))), default=None,
                        help="gpt: tiny|small|gpt2 (default small); llama: llama|tiny (default llama)")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=16, help="sequences per GPU per step")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=1337)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--out", type=Path, help="also write the JSON result here (rank 0)")
    args = parser.parse_args(argv)
    known = PRESETS if args.arch == "gpt" else LLAMA_PRESETS
    args.preset = args.preset or ("small" if args.arch == "gpt" else "llama")
    if args.preset not in known:
        parser.error(f"--preset {args.preset} is not a {args.arch} preset ({', '.join(known)})")
    return args


def sequence_length(args: argparse.Namespace) -> int:
    return PRESETS[args.preset].block_size if args.arch == "gpt" else LLAMA_PRESETS[args.preset][1]


def make_model(args: argparse.Namespace, dtype: torch.dtype, fsdp: bool) -> tuple[torch.nn.Module, list]:
    """The model (identical on every rank: seeded) and its blocks (FSDP2's sharding units)."""
    torch.manual_seed(args.seed)
    if args.arch == "gpt":
        # FSDP2 casts the gathered parameters itself; DDP keeps float32 parameters and the model
        # casts each weight on use.
        model = GPT(PRESETS[args.preset], fused=args.model == "coda",
                    compute_dtype=None if fsdp or dtype == torch.float32 else dtype)
        return model, list(model.blocks)
    from transformers import LlamaConfig, LlamaForCausalLM

    fields, seq = LLAMA_PRESETS[args.preset]
    hf = LlamaForCausalLM(LlamaConfig(**fields, max_position_embeddings=seq, use_cache=False,
                                      attn_implementation="sdpa"))
    if not fsdp:
        hf = hf.to(dtype)   # DDP: bf16 weights, as benchmarks/train.py trains the LLaMA
    if args.model == "coda":
        coda.patch(hf)
    return CausalLM(hf), list(hf.model.layers)


def build(args: argparse.Namespace, device: torch.device, dtype: torch.dtype) -> torch.nn.Module:
    """The model, identical on every rank, wrapped for --mode."""
    fsdp = args.mode == "fsdp"
    model, blocks = make_model(args, dtype, fsdp)
    model = model.to(device)
    if fsdp:
        policy = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)
        for block in blocks:
            fully_shard(block, mp_policy=policy)
        fully_shard(model, mp_policy=policy)
    else:
        model = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    if args.model == "compile":
        model = torch.compile(model)
    return model


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        sys.exit("benchmarks/train_distributed.py runs under torchrun (RANK and WORLD_SIZE are not set): "
                 "torchrun --nproc-per-node N benchmarks/train_distributed.py ...")
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
        block = sequence_length(args)
        generator = torch.Generator().manual_seed(args.seed)   # the same global batches on every rank
        mine = slice(rank * args.batch_size, (rank + 1) * args.batch_size)
        losses, timed_from = [], args.steps // 10
        start = time.perf_counter()
        for step in range(args.steps):
            if step == timed_from:
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                start = time.perf_counter()
            for group in optimizer.param_groups:
                group["lr"] = learning_rate(step, args.steps, args.lr)
            x, y = (t[mine] for t in batch(data, world * args.batch_size, block, generator, device))
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
            "mode": args.mode, "model": args.model, "arch": args.arch, "preset": args.preset,
            "world_size": world,
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
        dist.barrier()   # no rank leaves while another still uses the process group
    except BaseException:
        dist.destroy_process_group()
        raise
    # On success the process group goes with the process (os._exit below): gloo's teardown hung
    # once on a 2-core CI machine with every result written (the test's 600 s ran out).
    return 0


if __name__ == "__main__":
    code = main()
    # Everything is written. Leave without the interpreter's finalization: gloo's threads can
    # abort it ("terminate called without an active exception", seen once in a CPU test run).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
