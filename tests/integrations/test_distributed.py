"""coda.nn.GPT trained data-parallel under PyTorch DDP and FSDP2 (`fully_shard`), on CPU with gloo.

Two processes (torchrun, MASTER_ADDR=127.0.0.1, a free port, TRITON_INTERPRET=0 so that CODA runs
its reference backend) each take half of a global batch and train the `tiny` GPT in float64 for
three AdamW steps. Rank 0 saves the mean loss of each step, every gradient after each backward
(FSDP2: gathered from the shards with `full_tensor()`) and the final parameters; they must equal a
single-process run on the whole batch (each rank's loss is the mean over its half, DDP and FSDP2
average the gradients over the ranks, so the averages are the whole batch's mean and gradient) to
float64 rounding. Also: benchmarks/train_distributed.py runs two steps under gloo, and `coda.patch`
meets FSDP2 in the three orders a user may take (one process).

Run as a script, this file is the worker: `python -m torch.distributed.run --nproc_per_node 2
tests/integrations/test_distributed.py ddp|fsdp|patch OUT`.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from coda.nn import GPT, PRESETS

ROOT = Path(__file__).resolve().parents[2]
WORLD, BATCH, SEQ, STEPS, LR = 2, 4, 32, 3, 1e-2


def global_batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The step's whole batch (inputs, targets) [BATCH, SEQ]: the same on every process."""
    g = torch.Generator().manual_seed(100 + step)
    tokens = torch.randint(PRESETS["tiny"].vocab_size, (BATCH, SEQ + 1), generator=g)
    return tokens[:, :-1], tokens[:, 1:]


def fresh_model() -> GPT:
    torch.manual_seed(0)
    return GPT(PRESETS["tiny"]).double()


def full(t: torch.Tensor) -> torch.Tensor:
    """A plain tensor, gathered from its shards if t is an FSDP2 DTensor."""
    return t.full_tensor() if hasattr(t, "full_tensor") else t


# ------------------------------------------------------------------------------------------------
# The worker (run by torchrun)


def worker(mode: str, out: Path) -> None:
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = fresh_model()
    if mode == "ddp":
        wrapped = DistributedDataParallel(model)
    else:
        for block in model.blocks:
            fully_shard(block)
        wrapped = fully_shard(model)
    optimizer = torch.optim.AdamW(wrapped.parameters(), lr=LR)
    half = BATCH // WORLD
    losses, grads = [], []
    for step in range(STEPS):
        x, y = (t[rank * half:(rank + 1) * half] for t in global_batch(step))
        loss = wrapped(x, y)
        loss.backward()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        losses.append(mean.item() / WORLD)
        grads.append({name: full(p.grad).clone() for name, p in model.named_parameters()})
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    params = {name: full(p.detach()).clone() for name, p in model.named_parameters()}
    if rank == 0:
        torch.save({"losses": losses, "grads": grads, "params": params}, out)
    # No rank leaves while another still uses gloo; the process group then goes with the process
    # (os._exit in __main__): gloo's teardown hung once on a 2-core CI machine, results written.
    dist.barrier()


def patch_worker(out: Path) -> None:
    """A tiny HF LLaMA, coda.patch and fully_shard in three orders; what each did, to `out`."""
    import warnings

    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard
    from transformers import LlamaConfig, LlamaForCausalLM

    import coda

    dist.init_process_group("gloo")
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2)
    ids = torch.randint(64, (2, 8), generator=torch.Generator().manual_seed(0))

    def sharded(model, head_alone: bool = False):
        for part in [*model.model.layers, *[model.lm_head] * head_alone, model]:
            fully_shard(part)
        return model

    result = {"carried": []}
    from coda.integrations import hf
    taken = hf._carried_sums

    def recording(x, module):   # whether each norm found the previous layer's row sums
        sums = taken(x, module)
        result["carried"].append(sums[1] is not None)
        return sums

    hf._carried_sums = recording
    # patched, then each layer and the root sharded (the documented order): CODA's head, no logits
    result["patched_then_sharded_logits"] = sharded(coda.patch(LlamaForCausalLM(config)))(
        input_ids=ids, labels=ids).logits
    hf._carried_sums = taken
    try:   # sharded, then patched: FSDP2 had renamed the classes, so nothing was patched, silently
        coda.patch(sharded(LlamaForCausalLM(config)))
    except coda.CodaError as error:
        result["sharded_then_patched"] = str(error)
    # the head sharded on its own (torchtitan's layout): HF's head runs, with a warning
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = sharded(coda.patch(LlamaForCausalLM(config)), head_alone=True)
        logits = model(input_ids=ids, labels=ids).logits
    result["head_alone_logits"] = None if logits is None else tuple(logits.shape)
    result["head_alone_warnings"] = [str(w.message) for w in caught]
    torch.save(result, out)
    dist.barrier()


# ------------------------------------------------------------------------------------------------
# The tests


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(*args: str, nproc: int = WORLD) -> str:
    """Run `args` (a script and its arguments) in `nproc` processes; returns rank 0's stdout."""
    env = {**os.environ, "TRITON_INTERPRET": "0", "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", str(nproc),
           "--master_addr", "127.0.0.1", "--master_port", str(free_port()), *args]
    # Usually 10-20 s; on a 2-core CI machine the ranks share the cores with the other test
    # worker's subprocesses (one run of this session took over 180 s): a generous limit.
    proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr[-6000:]}"
    return proc.stdout


def reference() -> dict:
    """The same steps in one process on the whole batch."""
    model = fresh_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    losses, grads = [], []
    for step in range(STEPS):
        loss = model(*global_batch(step))
        loss.backward()
        losses.append(loss.item())
        grads.append({name: p.grad.clone() for name, p in model.named_parameters()})
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return {"losses": losses, "grads": grads, "params": dict(model.named_parameters())}


def check_parity(mode: str, tmp_path: Path) -> None:
    out = tmp_path / f"{mode}.pt"
    torchrun(__file__, mode, str(out))
    got, want = torch.load(out), reference()
    torch.testing.assert_close(got["losses"], want["losses"], rtol=1e-12, atol=0)
    for step in range(STEPS):
        assert got["grads"][step].keys() == want["grads"][step].keys()
        for name, g in want["grads"][step].items():
            torch.testing.assert_close(got["grads"][step][name], g, rtol=1e-9, atol=1e-13,
                                       msg=lambda m, n=name, s=step: f"step {s} grad {n}: {m}")
    # AdamW divides by sqrt(v) + 1e-8: where a gradient is zero in exact arithmetic (the key bias:
    # softmax ignores a constant added to every key) its rounding noise (~1e-17) moves the
    # parameter by up to ~lr * 1e-9, differently in the two runs.
    for name, p in want["params"].items():
        torch.testing.assert_close(got["params"][name], p.detach(), rtol=1e-9, atol=1e-10,
                                   msg=lambda m, n=name: f"param {n}: {m}")


def test_ddp_matches_single_process(tmp_path: Path) -> None:
    check_parity("ddp", tmp_path)


def test_fsdp2_matches_single_process(tmp_path: Path) -> None:
    check_parity("fsdp", tmp_path)


def test_patch_and_fsdp2_in_each_order(tmp_path: Path) -> None:
    """Patched, then sharded: CODA's head, and the layers' row sums carried. Sharded, then
    patched: refused (it patched nothing and said nothing). The LM head sharded on its own: HF's
    head (CODA's would read the shards), and a warning that says so (it was silent)."""
    out = tmp_path / "patch.pt"
    torchrun(__file__, "patch", str(out), nproc=1)
    result = torch.load(out)
    assert result["patched_then_sharded_logits"] is None
    # the row sums pass FSDP2's hooks on each sharded layer: the second layer's norm and the
    # final norm take them
    assert result["carried"] == [False, True, True]
    assert "already sharded by FSDP (fully_shard); patch the model first" in result["sharded_then_patched"]
    assert result["head_alone_logits"] == (2, 8, 64)
    assert any("sharded by FSDP on its own" in message for message in result["head_alone_warnings"])


def test_benchmark_script_runs_on_cpu(tmp_path: Path) -> None:
    import json

    out = tmp_path / "result.json"
    torchrun(str(ROOT / "benchmarks" / "train_distributed.py"), "--mode", "fsdp", "--model", "coda",
             "--preset", "tiny", "--device", "cpu", "--steps", "2", "--batch-size", "1", "--out", str(out))
    result = json.loads(out.read_text())
    assert result["world_size"] == WORLD and len(result["losses"]) == 2
    assert result["tokens_per_s_per_gpu"] > 0



@pytest.mark.parametrize("mode", ["ddp", "fsdp"])
def test_benchmark_llama_matches_one_process_with_the_global_batch(tmp_path: Path, mode: str) -> None:
    """The HF LLaMA with CODA patched in (issue: multi-GPU run), 2 ranks × 2 sequences against 1
    rank × 4: the same data, the same loss curve."""
    import json

    curves = {}
    for nproc in (1, WORLD):
        out = tmp_path / f"{nproc}.json"
        torchrun(str(ROOT / "benchmarks" / "train_distributed.py"), "--mode", mode, "--model", "coda",
                 "--arch", "llama", "--preset", "tiny", "--device", "cpu", "--steps", "3",
                 "--batch-size", str(4 // nproc), "--out", str(out), nproc=nproc)
        curves[nproc] = json.loads(out.read_text())["losses"]
    assert curves[1] == pytest.approx(curves[WORLD], rel=1e-5)


if __name__ == "__main__":
    if sys.argv[1] == "patch":
        patch_worker(Path(sys.argv[2]))
    else:
        worker(sys.argv[1], Path(sys.argv[2]))
    # the results are saved; skip the interpreter's finalization, which gloo's threads can abort
    # (benchmarks/train_distributed.py)
    sys.stdout.flush()
    os._exit(0)
