"""Triton device functions that the generated epilogues call (imported there as `cm`).

Everything is float32. On a GPU, `tanh` uses the `tanh.approx.f32` instruction (one MUFU op,
max. relative error about 2^-11, far below bf16/fp16 output rounding); under the Triton
interpreter, which cannot run inline assembly, it is computed from `exp`.
"""


import triton
import triton.language as tl

from ..runtime.program import interpreter_enabled
from ..runtime.rng import PHILOX_MULTIPLIER, PHILOX_ROUNDS, PHILOX_WEYL

FAST_MATH = tl.constexpr(not interpreter_enabled())
SQRT_2_OVER_PI = tl.constexpr(0.7978845608028654)
GELU_CUBIC = tl.constexpr(0.044715)
INV_SQRT_2 = tl.constexpr(0.7071067811865476)
INV_SQRT_2PI = tl.constexpr(0.3989422804014327)
LOG2_E = tl.constexpr(1.4426950408889634)
MULTIPLIER = tl.constexpr(PHILOX_MULTIPLIER)
WEYL = tl.constexpr(PHILOX_WEYL)
ROUNDS = tl.constexpr(PHILOX_ROUNDS)


@triton.jit
def _max_keeping_nan(a, b):
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def max_keeping_nan(x, axis: tl.constexpr):
    """`tl.max`, except that NaN counts as the largest value, as in `torch.amax` (`tl.max`
    skips NaN)."""
    return tl.reduce(x, axis, _max_keeping_nan)


@triton.jit
def limited(n, LIMIT):
    """min(n, the limit read at LIMIT, `m_limit=` or `k_limit=`), and not below 0: compared in
    the limit's own width, since an int64 limit from 2**31 on wraps when cast to int32 first."""
    return tl.maximum(tl.minimum(tl.load(LIMIT), n), 0).to(n.dtype)


@triton.jit
def tanh(x):
    if FAST_MATH:
        return tl.inline_asm_elementwise("tanh.approx.f32 $0, $1;", "=r,r", [x],
                                         dtype=tl.float32, is_pure=True, pack=1)
    else:   # from e^(-2|x|), which cannot overflow (the interpreter's numpy would warn)
        e = tl.exp(-2.0 * tl.abs(x))
        t = (1.0 - e) / (1.0 + e)
        return tl.where(x < 0.0, -t, t)


@triton.jit
def rcp(x):
    """1 / x for x away from the denormals: `rcp.approx.ftz.f32`, one MUFU op (an error of
    about 1 ulp), where a division compiles to the range checks and scalings of `div.full.f32`."""
    if FAST_MATH:
        return tl.inline_asm_elementwise("rcp.approx.ftz.f32 $0, $1;", "=r,r", [x],
                                         dtype=tl.float32, is_pure=True, pack=1)
    else:
        return 1.0 / x


@triton.jit
def exp2_ftz(x):
    """2^x with results below 2^-126 flushed to zero: `ex2.approx.ftz.f32`, one MUFU op, where
    `tl.exp2` compiles to the scalings that keep denormal results (which no caller needs)."""
    if FAST_MATH:
        return tl.inline_asm_elementwise("ex2.approx.ftz.f32 $0, $1;", "=r,r", [x],
                                         dtype=tl.float32, is_pure=True, pack=1)
    else:
        return tl.exp2(x)


@triton.jit
def exp(x):
    """e^x with results below 2^-126 flushed to zero: one multiplication and `exp2_ftz`, where
    `tl.exp` adds the range check and two scalings that keep denormal results."""
    return exp2_ftz(LOG2_E * x)


@triton.jit
def softplus(x):
    """log(1 + e^x): x itself above 20 (where they agree in float32), log(1 + e^x) down to -5,
    and below, where 1 + e^x would cancel (its relative error grew to 17% at -15 in float32),
    e - e^2/2 with e = e^x <= 0.0068 (its remainder, e^3/3, is below 1.6e-5 of it): within about
    1.5e-5 relative everywhere with an exact log (a GPU's own adds its error). (A longer series
    reaching further up, or a compensated log, made ptxas spill in the ping-pong kernel, whose
    epilogue is at its register limit.)"""
    e = exp(x)
    return tl.where(x > 20.0, x, tl.where(x < -5.0, e - e * e * 0.5, tl.log(1.0 + e)))


@triton.jit
def sigmoid(x):
    """1 / (1 + e^-x) in two MUFU ops (exp2_ftz, rcp): e^-x overflows to inf for x < -88, whose
    reciprocal is the 0 the function tends to."""
    return rcp(1.0 + exp2_ftz(-LOG2_E * x))


@triton.jit
def to_float(x):
    """A tile as float32. A bfloat16 value is the high half of its float32: a pair of them, packed
    in one register, becomes two float32 with one `and` and one shift (the conversion Triton
    emits moves the high half down and back up: three instructions a pair). Tiles only: every
    thread holds an even number of their elements."""
    if FAST_MATH and x.dtype == tl.bfloat16:
        return tl.inline_asm_elementwise("and.b32 $1, $2, 0xffff0000;\n\tshl.b32 $0, $2, 16;", "=r,=r,r",
                                         [x], dtype=tl.float32, is_pure=True, pack=2)
    else:
        return x.to(tl.float32)


@triton.jit
def round_bf16(x):
    """x rounded to the nearest bfloat16 (ties to even), as float32, as torch's conversion: on a
    GPU one `cvt.rn.bf16x2.f32` of x and 0, whose packed pair is the rounded float32's bits (a
    conversion to bf16 and back, as Triton emits it, packs pairs of values into registers, which
    made the cross-entropy's ping-pong epilogue spill); under the interpreter in integer
    arithmetic on the bits, where a NaN, whose mantissa's carry would reach the sign, stays x."""
    if FAST_MATH:
        return tl.inline_asm_elementwise("{ .reg .f32 zero; mov.f32 zero, 0f00000000;\n\t"
                                         "cvt.rn.bf16x2.f32 $0, $1, zero; }", "=r,r", [x],
                                         dtype=tl.float32, is_pure=True, pack=1)
    else:
        bits = x.to(tl.uint32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        return tl.where(x == x, bits.to(tl.float32, bitcast=True), x)


@triton.jit
def tanh_grad(x):
    t = tanh(x)
    return 1.0 - t * t


@triton.jit
def sigmoid_grad(x):
    s = sigmoid(x)
    return s * (1.0 - s)


@triton.jit
def gelu(x):
    # x Φ(x), Φ(x) = 0.5 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))): two multiplications, two
    # fused multiply-adds, the tanh and the last multiplication
    t = tanh(x * (SQRT_2_OVER_PI + SQRT_2_OVER_PI * GELU_CUBIC * (x * x)))
    return x * (0.5 + 0.5 * t)


@triton.jit
def gelu_grad(x):
    # Φ + x Φ' with Φ' = 0.5 (1 - t^2) s, s = sqrt(2/pi) (1 + 3 * 0.044715 x^2) and t the tanh of
    # gelu: as 0.5 (1 - t^2) = (1 - t) Φ, that is Φ + (Φ (x - x t)) s. Beside gelu of the same x
    # (the tanh and Φ are shared) it costs three fused multiply-adds and one multiplication.
    # Φ multiplies before s does: where Φ is 0 (x below about -10) the term is 0 for every finite
    # s, as torch's is (s · (x - x t), about 0.2 x^3, overflowed below x = -2e13: 0 · inf = NaN).
    x2 = x * x
    t = tanh(x * (SQRT_2_OVER_PI + SQRT_2_OVER_PI * GELU_CUBIC * x2))
    phi = 0.5 + 0.5 * t
    return phi + (phi * (x - x * t)) * (SQRT_2_OVER_PI + 3.0 * SQRT_2_OVER_PI * GELU_CUBIC * x2)


@triton.jit
def one_plus_erf(z):
    """(1 + erf(z), exp(-z^2)), in the form of Abramowitz & Stegun 7.1.26 (absolute error below
    6e-7 in float32): 1 + erf(z) = 2 - q for z >= 0 and q below, q = P(t) exp(-z^2) with
    t = 1 / (1 + 0.3275911 |z|), so there is no cancellation for negative z. One division, one
    exp2, five multiply-adds; measured faster than `tl.erf` (libdevice) in the GELU epilogues
    (docs/performance.md, sixteenth session)."""
    a = tl.abs(z)
    t = rcp(1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027
                                                                         + t * 1.061405429))))
    gauss = exp2_ftz(-LOG2_E * (a * a))
    q = poly * gauss
    return tl.where(z >= 0.0, 2.0 - q, q), gauss


@triton.jit
def gelu_erf(x):
    cdf2, _ = one_plus_erf(x * INV_SQRT_2)
    return 0.5 * x * cdf2


@triton.jit
def gelu_erf_grad(x):
    # 0.5 (1 + erf(x / sqrt 2)) + x exp(-x^2 / 2) / sqrt(2 pi): the same exponential twice
    cdf2, gauss = one_plus_erf(x * INV_SQRT_2)
    return 0.5 * cdf2 + x * gauss * INV_SQRT_2PI


@triton.jit
def silu(x):
    return x * sigmoid(x)


@triton.jit
def silu_grad(x):
    s = sigmoid(x)
    return s * (1.0 + x * (1.0 - s))


@triton.jit
def philox(seed, c0, c1):
    """Philox-2x32-10 of counter (c0, c1) under key seed, as in runtime/rng.py."""
    c0 = c0.to(tl.uint32)
    c1 = c1.to(tl.uint32)
    key = seed.to(tl.uint32)
    for _ in tl.static_range(ROUNDS):
        product = c0.to(tl.uint64) * MULTIPLIER  # one 32 x 32 -> 64-bit multiply (IMAD.WIDE)
        hi = (product >> 32).to(tl.uint32)
        lo = product.to(tl.uint32)
        c0 = hi ^ c1 ^ key
        c1 = lo
        key = key + WEYL
    return c0, c1


@triton.jit
def block_corners(t, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """[BLOCK_M, BLOCK_N] -> [BLOCK_M // 16, 8, BLOCK_N // 2]: the first element of each dropout
    block (rows r and r + 8 of a 16-row group, columns 2j and 2j + 1)."""
    blocks = tl.permute(tl.reshape(t, (BLOCK_M // 16, 2, 8, BLOCK_N // 2, 2)), (0, 2, 3, 4, 1))
    first_row, _ = tl.split(blocks)
    corner, _ = tl.split(first_row)
    return corner


@triton.jit
def random_bits(seed, rows, cols, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """[BLOCK_M, BLOCK_N] random 16-bit numbers (as uint32) at global `rows` x `cols` (BLOCK_M
    rows from a multiple of 16, BLOCK_N columns from an even one): one Philox call per block of
    rows r, r + 8 and columns 2j, 2j + 1 (runtime/rng.py). Drawn in the tile's own layout:
    where a thread holds whole blocks, as in the wgmma accumulator, no number moves between
    threads."""
    r = block_corners(tl.broadcast_to(rows[:, None], (BLOCK_M, BLOCK_N)), BLOCK_M, BLOCK_N)
    c = block_corners(tl.broadcast_to(cols[None, :], (BLOCK_M, BLOCK_N)), BLOCK_M, BLOCK_N)
    first, second = philox(seed, c // 2, (r // 16) * 8 + r % 8)
    # [M / 16, 8, N / 2, column parity, row + 8] back to [M, N]
    blocks = tl.join(tl.join(first & 0xFFFF, first >> 16), tl.join(second & 0xFFFF, second >> 16))
    return tl.reshape(tl.permute(blocks, (0, 4, 1, 2, 3)), (BLOCK_M, BLOCK_N))


@triton.jit
def probability(p):
    """A dropout probability read from a device tensor, which no launch checks: outside [0, 1]
    the nearest bound, NaN as 1 (all dropped), as the reference takes it."""
    return tl.where(p == p, tl.minimum(tl.maximum(p, 0.0), 1.0), 1.0)


@triton.jit
def keep_threshold(p):
    """Dropout keeps an element whose 16-bit number u has u * 2**-16 >= p, that is (scaling by a
    power of two is exact) u >= ceil(p * 2**16): one integer comparison per element."""
    return tl.ceil(p * 65536.0).to(tl.uint32)


@triton.jit
def dropout(x, p, keep):
    # x times 0 or 1 / (1 - p), as PyTorch's dropout: a dropped NaN or inf stays NaN
    return x * tl.where(keep, 1.0 / (1.0 - p), 0.0)
