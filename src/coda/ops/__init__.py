"""Transformer operators as GEMM + epilogue programs, forward and backward.

Each op is a `torch.autograd.Function` whose passes are CODA programs (see docs/ops.md). The
plain GEMMs and reshapes the ops share (`matmul`, `weight_grad`, `as_rows`) are in
`coda.ops.common`: building blocks that check nothing, not ops.
"""

from .cross_entropy import linear_cross_entropy
from .dropout import dropout
from .embedding import embedding, tied_embedding
from .gated_mlp import deinterleave, geglu_mlp, interleave, swiglu_mlp
from .linear import linear, mlp
from .norms import layer_norm_linear, out_proj_residual, rms_norm_linear, rms_rstd
from .rope import permute_for_interleaved_rope, qkv_rope, rope

__all__ = ["deinterleave", "dropout", "embedding", "geglu_mlp", "interleave", "layer_norm_linear",
           "linear", "linear_cross_entropy", "mlp", "out_proj_residual",
           "permute_for_interleaved_rope", "qkv_rope", "rms_norm_linear", "rms_rstd", "rope",
           "swiglu_mlp", "tied_embedding"]
