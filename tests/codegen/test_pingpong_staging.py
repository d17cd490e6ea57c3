"""The ping-pong kernel's staging of epilogue tiles, read from its generated source (Gluon does
not run on the CPU; tests/gpu runs these kernels): an output whose dtype and width equal a staged
tile operand's leaves through that operand's buffer of the slice, with no buffer of its own and
no wait per slice, a packed [M, 2N] output through two operands' buffers, a half in each; the
next tile's operands are fetched only after those stores have read it."""

from __future__ import annotations

import torch

import coda
from coda.codegen import kernel as kernel_module
from coda.codegen.epilogue import generate_epilogue, pingpong_parts

M, N, K = 256, 256, 64


def staging(src: str, share_tiles: bool = False, **operands) -> tuple[tuple, str, str]:
    """(reuse pairs, the epilogue's source, the kernel's program-specific pieces: prologue,
    prefetch, release of shared buffers and the operands' own partition) of a ping-pong launch."""
    prog = coda.compile(src)
    a = torch.randn(M, K, dtype=torch.bfloat16)
    w = torch.randn(N, K, dtype=torch.bfloat16)
    sig = kernel_module._signature(prog.bind(a, w.T, **operands), "pingpong", share_tiles=share_tiles)
    parts = pingpong_parts(prog, sig)
    return sig.reuse, generate_epilogue(prog, sig, gluon=True), "\n".join(
        parts[key] for key in ("{PROLOGUE}", "{PREFETCH}", "{TILES_FREE}", "{OPERAND_PARTITION}"))


def test_an_output_is_staged_in_its_operands_buffer():
    residual = torch.randn(M, N, dtype=torch.bfloat16)
    reuse, epilogue, kernel = staging("EPILOGUE(residual: tile) { output = input + residual;"
                                      " ss = row_sum(output * output); }", residual=residual)
    assert reuse == (("out_output", ("op_residual",)),)
    assert "out_output_bufs" not in kernel and "op_residual_bufs = " in kernel
    assert "tma.store_wait" not in epilogue          # each slice writes a buffer of its own
    # every warp has read the operand's buffers, and the stores that read them have ended,
    # before the next tile's operands arrive
    assert (kernel.index("gl.thread_barrier()") < kernel.index("tma.store_wait(0)")
            < kernel.index("tma.async_copy_global_to_shared"))


def test_only_an_operand_of_the_same_dtype_is_shared_and_each_only_once():
    two_outputs = ("EPILOGUE(residual: tile) { h = input + residual; save pre = h;"
                   " output = gelu(h); }")
    reuse, epilogue, kernel = staging(two_outputs, residual=torch.randn(M, N, dtype=torch.bfloat16))
    assert len(reuse) == 1 and reuse[0][1] == ("op_residual",)
    alone = "out_output" if reuse[0][0] == "out_pre" else "out_pre"
    assert f"{alone}_bufs = " in kernel
    assert "tma.store_wait(1)" in epilogue           # the other output's own buffer, as before
    reuse, _, kernel = staging(two_outputs, residual=torch.randn(M, N, dtype=torch.float32))
    assert reuse == () and "out_output_bufs = " in kernel and "out_pre_bufs = " in kernel


SWIGLU_GRAD = ("EPILOGUE(g: tile, u: tile) { dg = input * u * silu_grad(g); du = input * silu(g);"
               " output = pack(dg, du); dr = row_sum(dg * g + du * u); }")


def test_a_packed_output_is_staged_in_two_operands_buffers_a_half_in_each():
    g, u = (torch.randn(M, N, dtype=torch.bfloat16) for _ in range(2))
    reuse, epilogue, kernel = staging(SWIGLU_GRAD, g=g, u=u)
    assert reuse == (("out_output", ("op_g", "op_u")),)
    # the descriptor spans the packed [M, 2N] output in boxes of the slice's width
    assert "out_output_desc = tma.make_tensor_descriptor(out_output_ptr, [M, N * 2]" in kernel
    assert "out_output_bufs" not in kernel and "tma.store_wait" not in epilogue
    first, second = (line for line in epilogue.splitlines() if "async_copy_shared_to_global" in line)
    assert "tile_n * (BLOCK_N * 2)]" in first and "out_output_smem)" in first
    assert "tile_n * (BLOCK_N * 2) + BLOCK_N]" in second and "out_output_smem_hi)" in second


def test_a_packed_output_without_two_free_buffers_is_stored_through_pointers():
    g = torch.randn(M, N, dtype=torch.bfloat16)
    for u in (torch.randn(M, N, dtype=torch.float32), torch.randn(M, N + 4, dtype=torch.bfloat16)[:, :N]):
        reuse, epilogue, _ = staging(SWIGLU_GRAD, g=g, u=u)
        assert reuse == () and "tl.store(out_output_ptr" in epilogue


def test_shared_operand_buffers_take_turns_between_the_warpgroups():
    """With share_tiles one buffer per slice serves both warpgroups: a warp of its own fetches
    each tile's operands, the warpgroups' tiles in turn, once the other warpgroup's epilogue has
    released them (every warp has read them and the stores staged in them have ended)."""
    g, u = (torch.randn(M, N, dtype=torch.bfloat16) for _ in range(2))
    _, _, kernel = staging(SWIGLU_GRAD, share_tiles=True, g=g, u=u)
    assert "[EPILOGUE_SPLIT, BLOCK_M" in kernel and "WG * EPILOGUE_SPLIT" not in kernel
    lines = [line.strip() for line in kernel.splitlines()]
    release = lines.index("mbarrier.arrive(tiles_free.index(0), count=1)")
    assert lines[release - 3:release - 1] == ["gl.thread_barrier()", "tma.store_wait(0)"]
    fetch = lines.index("mbarrier.wait(tiles_free.index(0), (i + 1) & 1)")
    assert lines[fetch - 1] == "WG = i % 2"
    assert lines[fetch + 1].startswith("mbarrier.expect(tiles_ready.index(WG)")
    assert lines[fetch + 3].endswith("tiles_ready.index(WG), op_g_bufs.index(j))")
    _, _, alone = staging(SWIGLU_GRAD, g=g, u=u)   # each warpgroup its own: fetched at the tile's start
    assert "2 * EPILOGUE_SPLIT" in alone and "tiles_free" not in alone and "operand_partition" not in alone
