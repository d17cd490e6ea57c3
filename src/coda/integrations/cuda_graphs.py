"""A whole training step captured once as a CUDA graph and replayed: no host time per kernel.

Without a graph a step of many small kernels is bound by the host's launch cost (a patched BERT-base
trains at 0.78x eager's speed on the H200 machine; captured, at 1.25x: docs/benchmarks-log.md). This is
PyTorch's whole-network capture recipe, in one call:

    def train_step(input_ids, labels):
        loss = model(input_ids=input_ids, labels=labels).loss
        loss.backward()
        optimizer.step()
        return loss

    step = coda.capture_step(train_step, optimizer, input_ids=ids, labels=labels)
    for ids, labels in batches:
        loss = step(input_ids=ids, labels=labels)   # copied into the graph's inputs, replayed

`capture_step` runs `warmup` steps on the example batch on a side stream (they are training steps:
they compile CODA's kernels and create the optimizer's state, which cannot happen inside a
capture), sets the gradients to None so that the captured backward allocates them from the graph's
pool, and captures one step. A replay recomputes the same kernels on the new batch's values: the
batch must keep the example's shapes and dtypes, and the step must not depend on values read back
on the host (`.item()`, data-dependent shapes). The graph keeps the optimizer's numbers as it
captured them: a learning-rate schedule must change a tensor `lr` in place (PyTorch's schedulers
do), and a replay after a group's plain number changed (a scheduler over a float `lr`) is an
error, not a step at the old rate. Dropout in CODA's ops needs an explicit `seed=`
under capture (its mask is then the same at every replay; docs/ops.md). The captured step keeps
the step function and the optimizer (so the parameters and their state) alive as long as it
lives: the graph writes them in place and holds no references of its own.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ..errors import CodaError


@dataclass
class CapturedStep:
    """A captured training step: call it with a batch like the example; returns the step's loss."""

    graph: torch.cuda.CUDAGraph
    inputs: dict[str, torch.Tensor]
    loss: torch.Tensor
    #: the losses of the warm-up steps, which trained on the example batch
    warmup_losses: list[torch.Tensor] = field(default_factory=list)
    #: the step function and the optimizer: a graph holds no references to the memory its
    #: kernels use, so without these a dropped model or optimizer would be freed under it (a
    #: later capture empties the allocator's cache: the replay then faults)
    keep_alive: tuple = ()
    #: the optimizer and its groups' plain numbers (lr, betas, ...) as captured
    optimizer: torch.optim.Optimizer | None = None
    hyperparameters: list[dict] = field(default_factory=list)

    def __call__(self, **batch: torch.Tensor) -> torch.Tensor:
        if self.optimizer is not None:
            _check_unchanged(self.optimizer, self.hyperparameters)
        if batch.keys() != self.inputs.keys():
            raise CodaError(f"capture_step: the step was captured with inputs {sorted(self.inputs)}, "
                            f"got {sorted(batch)}")
        for name, value in batch.items():
            static = self.inputs[name]
            if (not isinstance(value, torch.Tensor) or value.shape != static.shape
                    or value.dtype != static.dtype):
                got = (f"{list(value.shape)} {value.dtype}" if isinstance(value, torch.Tensor)
                       else type(value).__name__)
                raise CodaError(f"capture_step: input {name!r} must be a tensor of shape "
                                f"{list(static.shape)} and dtype {static.dtype} (as captured), got {got}")
            static.copy_(value, non_blocking=True)
        self.graph.replay()
        return self.loss.detach().clone()


def capture_step(step: Callable[..., torch.Tensor], optimizer: torch.optim.Optimizer, *,
                 warmup: int = 3, context: Callable[[], contextlib.AbstractContextManager] | None = None,
                 **example: torch.Tensor) -> CapturedStep:
    """Capture `step(**example)` (forward, backward and `optimizer.step()`, returning the loss) as
    a CUDA graph after `warmup` steps on the example batch; returns the replaying step.

    `optimizer` must be capturable (`torch.optim.AdamW(..., fused=True, capturable=True)`); its
    gradients are set to None before the capture. `context` makes a context manager entered
    around the capture (for HuggingFace models without padding:
    `coda.integrations.hf.unpadded_batches`, which keeps SDPA's fused attention under capture)."""
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise CodaError("capture_step: optimizer must be a torch.optim.Optimizer, got "
                        f"{type(optimizer).__name__}")
    if any(group.get("capturable") is False for group in optimizer.param_groups):   # a group's own too
        raise CodaError(f"capture_step: {type(optimizer).__name__} must be created with capturable=True "
                        "(in every parameter group) to be captured in a CUDA graph")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 1:
        raise CodaError(f"capture_step: warmup must be an int >= 1 (the kernels compile there), "
                        f"got {warmup!r}")
    if not example:
        raise CodaError("capture_step: pass the example batch as keyword tensors (input_ids=...)")
    for name, value in example.items():
        if not isinstance(value, torch.Tensor) or not value.is_cuda:
            where = f"on {value.device}" if isinstance(value, torch.Tensor) else f"a {type(value).__name__}"
            raise CodaError(f"capture_step: CUDA graphs need CUDA tensors; input {name!r} is {where}")
    inputs = {name: value.clone() for name, value in example.items()}
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    losses = []
    with torch.cuda.stream(side):
        for _ in range(warmup):
            losses.append(_loss_of(step(**inputs)).detach())
            optimizer.zero_grad(set_to_none=True)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    optimizer.zero_grad(set_to_none=True)
    with context() if context is not None else contextlib.nullcontext(), torch.cuda.graph(graph):
        loss = _loss_of(step(**inputs))
    return CapturedStep(graph, inputs, loss, losses, keep_alive=(step, optimizer), optimizer=optimizer,
                        hyperparameters=numbers_of(optimizer))


def numbers_of(optimizer: torch.optim.Optimizer) -> list[dict]:
    """Each parameter group's settings that a captured step bakes in: its plain numbers and
    tuples of them (a tensor setting is read from the device at every replay)."""
    def plain(value) -> bool:
        return isinstance(value, (bool, int, float)) or (
            isinstance(value, tuple) and all(isinstance(v, (bool, int, float)) for v in value))
    return [{key: value for key, value in group.items() if key != "params" and plain(value)}
            for group in optimizer.param_groups]


def _check_unchanged(optimizer: torch.optim.Optimizer, captured: list[dict]) -> None:
    """A CodaError where a group's setting no longer is what the graph replays (keys added since,
    such as a scheduler's `initial_lr`, are not the graph's)."""
    for index, (group, numbers) in enumerate(zip(optimizer.param_groups, captured, strict=False)):
        for key, then in numbers.items():
            now = group.get(key)
            if type(now) is not type(then) or now != then:
                fix = (f"for a schedule, create the optimizer with lr=torch.tensor({then!r}, device='cuda'), "
                       "which schedulers change in place" if key == "lr" else "capture the step again")
                raise CodaError(f"capture_step: parameter group {index}'s {key!r} is now {now!r}, but the "
                                f"captured step replays {then!r} (a CUDA graph keeps the numbers it was "
                                f"captured with); {fix}")


def _loss_of(loss) -> torch.Tensor:
    if not isinstance(loss, torch.Tensor):
        raise CodaError(f"capture_step: the step must return its loss as a tensor, got {type(loss).__name__}")
    return loss
