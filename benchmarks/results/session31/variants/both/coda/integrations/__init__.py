"""CODA inside other frameworks.

`coda.integrations.compile`: the coda.ops operators as `torch.library` custom ops, so that models
built on them compile with `torch.compile` without graph breaks (docs/integrations.md).
"""

from . import compile  # noqa: A004 - the submodule, named after what it integrates with

__all__ = ["compile"]

from .cuda_graphs import capture_step  # `coda.capture_step`: a training step as a CUDA graph
from .hf import patch  # `coda.patch(model)`: HuggingFace models through coda.ops

__all__ += ["capture_step", "patch"]
