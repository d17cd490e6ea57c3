"""Models built on `coda.ops`: GPT-2 (`GPT`, `GPTConfig`, `PRESETS`) and the stand-alone
`layer_norm` it needs where no GEMM can absorb the norm."""

from .gpt import GPT, PRESETS, GPTConfig
from .layer_norm import layer_norm

__all__ = ["GPT", "PRESETS", "GPTConfig", "layer_norm"]

from .bert import BertLayer  # the drop-in modules and blocks
from .llama import LlamaBlock
from .modules import FusedMLP, LayerNormLinear, Linear, RMSNormLinear, SwiGLUMLP

__all__ += ["BertLayer", "FusedMLP", "LayerNormLinear", "Linear", "LlamaBlock", "RMSNormLinear",
            "SwiGLUMLP"]
