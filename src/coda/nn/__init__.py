"""Models built on `coda.ops`: GPT-2 (`GPT`, `GPTConfig`, `PRESETS`) and the stand-alone norms
(`layer_norm`, `rms_norm`) for where no GEMM can absorb a norm."""

from .gpt import GPT, PRESETS, GPTConfig
from .layer_norm import layer_norm, rms_norm

__all__ = ["GPT", "PRESETS", "GPTConfig", "layer_norm", "rms_norm"]

from .bert import BertLayer  # the drop-in modules and blocks
from .llama import LlamaBlock
from .modules import FusedMLP, LayerNormLinear, Linear, RMSNormLinear, SwiGLUMLP

__all__ += ["BertLayer", "FusedMLP", "LayerNormLinear", "Linear", "LlamaBlock", "RMSNormLinear",
            "SwiGLUMLP"]
