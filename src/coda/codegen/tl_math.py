"""Triton device functions that the generated epilogues call (imported there as `cm`).

Everything is float32. On a GPU, `tanh` uses the `tanh.approx.f32` instruction (one MUFU op,
max. relative error about 2^-11, far below bf16/fp16 output rounding); under the Triton
interpreter, which cannot run inline assembly, it is computed from `exp`.
"""

import os

import triton
import triton.language as tl

from ..runtime.rng import PHILOX_MULTIPLIER, PHILOX_ROUNDS, PHILOX_WEYL

FAST_MATH = tl.constexpr(os.environ.get("TRITON_INTERPRET", "0") != "1")
SQRT_2_OVER_PI = tl.constexpr(0.7978845608028654)
GELU_CUBIC = tl.constexpr(0.044715)
INV_SQRT_2 = tl.constexpr(0.7071067811865476)
INV_SQRT_2PI = tl.constexpr(0.3989422804014327)
MULTIPLIER = tl.constexpr(PHILOX_MULTIPLIER)
WEYL = tl.constexpr(PHILOX_WEYL)
ROUNDS = tl.constexpr(PHILOX_ROUNDS)


@triton.jit
def tanh(x):
    if FAST_MATH:
        return tl.inline_asm_elementwise("tanh.approx.f32 $0, $1;", "=r,r", [x],
                                         dtype=tl.float32, is_pure=True, pack=1)
    else:
        return 2.0 * tl.sigmoid(2.0 * x) - 1.0


@triton.jit
def tanh_grad(x):
    t = tanh(x)
    return 1.0 - t * t


@triton.jit
def sigmoid_grad(x):
    s = tl.sigmoid(x)
    return s * (1.0 - s)


@triton.jit
def gelu(x):
    return 0.5 * x * (1.0 + tanh(SQRT_2_OVER_PI * x * (1.0 + GELU_CUBIC * x * x)))


@triton.jit
def gelu_grad(x):
    t = tanh(SQRT_2_OVER_PI * x * (1.0 + GELU_CUBIC * x * x))
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * SQRT_2_OVER_PI * (1.0 + 3.0 * GELU_CUBIC * x * x)


@triton.jit
def gelu_erf(x):
    return 0.5 * x * (1.0 + tl.erf(x * INV_SQRT_2))


@triton.jit
def gelu_erf_grad(x):
    return 0.5 * (1.0 + tl.erf(x * INV_SQRT_2)) + x * tl.exp(-0.5 * x * x) * INV_SQRT_2PI


@triton.jit
def silu(x):
    return x * tl.sigmoid(x)


@triton.jit
def silu_grad(x):
    s = tl.sigmoid(x)
    return s * (1.0 + x * (1.0 - s))


@triton.jit
def philox(seed, c0, c1):
    """Philox-2x32-10 of counter (c0, c1) under key seed, as in runtime/rng.py."""
    c0 = c0.to(tl.uint32)
    c1 = c1.to(tl.uint32)
    key = seed.to(tl.uint32)
    for _ in tl.static_range(ROUNDS):
        hi = tl.umulhi(c0, MULTIPLIER)
        lo = c0 * MULTIPLIER
        c0 = hi ^ c1 ^ key
        c1 = lo
        key = key + WEYL
    return c0, c1


@triton.jit
def uniform4(seed, rows, quads, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """[BLOCK_M, BLOCK_N] uniforms in [0, 1) for the column quads `quads` (column // 4): one
    Philox call per four columns, split into four 16-bit numbers (runtime/rng.py)."""
    first, second = philox(seed, quads[None, :], rows[:, None])
    # join stacks on a new minor axis, so join(join(a, b), join(c, d)) flattens to a, c, b, d.
    low = tl.join(first & 0xFFFF, second & 0xFFFF)
    high = tl.join(first >> 16, second >> 16)
    bits = tl.reshape(tl.join(low, high), (BLOCK_M, BLOCK_N))
    return bits.to(tl.float32) * (1.0 / 65536.0)


@triton.jit
def dropout(x, p, keep):
    return tl.where(keep, x / (1.0 - p), 0.0)
