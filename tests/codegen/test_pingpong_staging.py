"""The ping-pong kernel's staging of epilogue tiles, read from its generated source (Gluon does
not run on the CPU; tests/gpu runs these kernels): an output whose dtype and width equal a staged
tile operand's leaves through that operand's buffer of the slice, with no buffer of its own and
no wait per slice; the next tile's operands are fetched only after those stores have read it."""

from __future__ import annotations

import torch

import coda
from coda.codegen import kernel as kernel_module
from coda.codegen.epilogue import generate_epilogue, pingpong_parts

M, N, K = 256, 256, 64


def staging(src: str, **operands) -> tuple[tuple, str, str]:
    """(reuse pairs, the epilogue's source, the kernel prologue and prefetch) of a ping-pong launch."""
    prog = coda.compile(src)
    a = torch.randn(M, K, dtype=torch.bfloat16)
    w = torch.randn(N, K, dtype=torch.bfloat16)
    sig = kernel_module._signature(prog.bind(a, w.T, **operands), "pingpong")
    parts = pingpong_parts(prog, sig)
    return sig.reuse, generate_epilogue(prog, sig, gluon=True), parts["{PROLOGUE}"] + parts["{PREFETCH}"]


def test_an_output_is_staged_in_its_operands_buffer():
    residual = torch.randn(M, N, dtype=torch.bfloat16)
    reuse, epilogue, kernel = staging("EPILOGUE(residual: tile) { output = input + residual;"
                                      " ss = row_sum(output * output); }", residual=residual)
    assert reuse == (("out_output", "op_residual"),)
    assert "out_output_bufs" not in kernel and "op_residual_bufs = " in kernel
    assert "tma.store_wait" not in epilogue          # each slice writes a buffer of its own
    # the stores that read the operand's buffers end before the next tile's operands arrive
    assert kernel.index("tma.store_wait(0)") < kernel.index("tma.async_copy_global_to_shared")


def test_only_an_operand_of_the_same_dtype_is_shared_and_each_only_once():
    two_outputs = ("EPILOGUE(residual: tile) { h = input + residual; save pre = h;"
                   " output = gelu(h); }")
    reuse, epilogue, kernel = staging(two_outputs, residual=torch.randn(M, N, dtype=torch.bfloat16))
    assert len(reuse) == 1 and reuse[0][1] == "op_residual"
    alone = "out_output" if reuse[0][0] == "out_pre" else "out_pre"
    assert f"{alone}_bufs = " in kernel
    assert "tma.store_wait(1)" in epilogue           # the other output's own buffer, as before
    reuse, _, kernel = staging(two_outputs, residual=torch.randn(M, N, dtype=torch.float32))
    assert reuse == () and "out_output_bufs = " in kernel and "out_pre_bufs = " in kernel
