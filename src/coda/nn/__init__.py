"""Models built on `coda.ops`: GPT-2 (`GPT`, `GPTConfig`, `PRESETS`) and the stand-alone
`layer_norm` it needs where no GEMM can absorb the norm."""

from .gpt import GPT, PRESETS, GPTConfig
from .layer_norm import layer_norm

__all__ = ["GPT", "PRESETS", "GPTConfig", "layer_norm"]
