"""The generated Triton kernels, run by Triton's interpreter on the CPU (fp32 and fp16).

Each result is compared with the float64 formula of `oracle.py` and with the reference backend
(dropout: identical masks). Tiles are 32x32x32 under the interpreter, so the shapes here span
several tiles in M, N and K, with ragged edges.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import coda
import oracle
from coda.runtime.program import interpreter_enabled

pytestmark = pytest.mark.skipif(not interpreter_enabled() and not torch.cuda.is_available(),
                                reason="needs TRITON_INTERPRET=1 (set by tests/conftest.py) or a GPU")

SHAPES = [(67, 50, 33), (1, 6, 1), (96, 130, 70)]
TOL = {torch.float32: 2e-3, torch.float16: 2e-2}  # tf32-free fp32 dot in the interpreter; fp16 I/O


def run_both(prog, a, b, **kw):
    out = prog(a, b, backend="triton", **kw)
    ref = prog(a, b, backend="reference", **kw)
    return out, ref


def rel(x, want) -> float:
    x, want = oracle.np64(x), np.asarray(want, dtype=np.float64)
    return float(np.linalg.norm(x - want) / max(np.linalg.norm(want), 1e-30))


def poisoned(shape, dtype):
    return torch.full(shape, float("nan"), dtype=dtype)


def test_softplus_keeps_its_relative_accuracy_far_from_zero():
    """Element by element, not by norm: log(1 + e^x) cancels where e^x nears float32's epsilon,
    which cost the generated softplus up to 17% relative error between -15 and -10 (now about
    1.5e-5 at most, where its series e - e^2/2 takes over at -5)."""
    x = torch.linspace(-80.0, 30.0, 64 * 64).reshape(64, 64)
    prog = coda.compile("EPILOGUE { output = softplus(input); }")
    out = oracle.np64(prog.map(x, backend="triton")["output"])
    want = torch.nn.functional.softplus(x.double()).numpy()
    assert np.max(np.abs(out - want) / want) < 3e-5


@pytest.mark.parametrize("name", sorted(oracle.ELEMENTWISE))
def test_every_elementwise_primitive(name):
    formula, domains = oracle.ELEMENTWISE[name]
    m, n, k = 45, 40, 19
    a, b = oracle.launch_inputs(m, n, k, seed=1, dtype=torch.float32, domain=domains[0])
    g = torch.Generator().manual_seed(2)
    extra = {f"y{i}": oracle.random_values((m, n), d, g, torch.float32)
             for i, d in enumerate(domains[1:], start=1)}
    args = ", ".join(["input", *extra])
    header = ", ".join(f"{key}: tile" for key in extra)
    prog = coda.compile(f"EPILOGUE({header}) {{ output = {name}({args}); }}")
    out, ref = run_both(prog, a, b, **extra)
    acc = oracle.np64(a) @ oracle.np64(b)
    want = formula(acc, *(oracle.np64(v) for v in extra.values()))
    if domains[0] in ("int", "mask"):   # exact inputs: comparisons must agree exactly
        np.testing.assert_array_equal(oracle.np64(out["output"]), want)
    else:
        assert rel(out["output"], want) < 1e-5
        assert rel(out["output"], oracle.np64(ref["output"])) < 1e-5


@pytest.mark.parametrize(("name", "dtype"), [("round_bf16", torch.bfloat16), ("round_fp16", torch.float16)])
def test_rounding_matches_torch_bit_for_bit(name, dtype):
    """round_bf16 / round_fp16 against torch's conversion, on exact GEMM results (B = I): ties
    (to even), values past the dtype's largest (inf), negatives, tiny ones."""
    info = torch.finfo(dtype)
    ulp = info.eps / 2   # a tie's offset from 1 (half the spacing there)
    past = min(info.max * 1.01, 3.4e38)   # rounds to inf (finite in float32: B = I keeps it)
    special = torch.tensor([1 + ulp, 1 + 3 * ulp, -(1 + ulp), 1 + ulp * 1.5, past, -past, info.max,
                            1e-20, 0.0, 3.0e38], dtype=torch.float64)
    g = torch.Generator().manual_seed(3)
    a = torch.cat([special, torch.randn(54, generator=g, dtype=torch.float64) * 100]).float().view(8, 8)
    prog = coda.compile(f"EPILOGUE() {{ output = {name}(input); }}")
    got = prog(a, torch.eye(8), backend="triton", out=poisoned((8, 8), torch.float32))["output"]
    want = a.to(dtype).float()
    assert torch.equal(got, want), (got - want).abs().max()


@pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning")   # numpy's, 1 / ±0
@pytest.mark.parametrize("expr", ["1.0 / -z", "1.0 / (0.0 - z)", "1.0 / (z + 0.0)", "1.0 / (z - -0.0)",
                                  "1.0 / (-0.0 - z)", "1.0 / (z * -1.0)", "rsqrt(0.0 - z)",
                                  "1.0 / max(0.0, z)", "1.0 / min(-0.0, z)", "1.0 / relu(z)"])
def test_signs_of_zeros_as_eager_float32(expr):
    """Triton's unary minus is 0 - x and its tl.full makes -0.0 +0; the simplifier took x + 0 and
    0 - x for x and -x, and max(0.0, x) for max(x, 0.0) (torch's max of two zeros follows the
    order), and relu was tl.maximum's (+0 at -0, torch's is -0): each flipped 1/±0 between +inf
    and -inf (audits' finds)."""
    prog = coda.compile(f"EPILOGUE (z: tile) {{ output = {expr}; }}")
    z = torch.tensor([[0.0, -0.0, 2.0, -3.0]])
    want = eval(expr, {"z": z, "rsqrt": torch.rsqrt, "relu": torch.relu,
                       "max": lambda a, b: torch.maximum(torch.as_tensor(a), torch.as_tensor(b)),
                       "min": lambda a, b: torch.minimum(torch.as_tensor(a), torch.as_tensor(b))})
    # min and max of two zeros of opposite signs are the hardware's (or numpy's) on Triton
    for backend in ("reference",) if "max" in expr or "min" in expr else ("triton", "reference"):
        got = prog.map(torch.ones(1, 4), z=z, backend=backend)["output"]
        torch.testing.assert_close(got, want, rtol=1e-5, atol=0, equal_nan=True, msg=backend)


@pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning")   # numpy's, 1 / ±0
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_scalar_tensor_operand_is_float32_and_keeps_its_sign(dtype):
    """A scalar operand was broadcast as 0.0 + s (a -0.0 became +0: 1 / s gave +inf) and a
    float64 0-d tensor was computed with in float64 (s == 0.1 true where float32's is not,
    round_bf16 a Triton error): both as the reference backend now. (A Python float -0.0 is a
    constant to Triton's interpreter, which makes it +0; compiled kernels take it as an
    argument: tests/gpu/test_triton_gpu.py.)"""
    prog = coda.compile("EPILOGUE (s: scalar, t: scalar) { output = input / s; save prod = input * s;"
                        " save same = where(t == 0.1, 1.0, 2.0) + round_bf16(input * t); }")
    x = torch.tensor([[1.0, -2.0, 0.0, 3.0]])
    args = dict(s=torch.tensor(-0.0, dtype=dtype), t=torch.tensor(0.1, dtype=dtype))
    want = prog.map(x, backend="reference", **args)
    got = prog.map(x, backend="triton", **args)
    # 0.1 in float32 is not float64's 0.1: where(...) gives 1
    assert want["same"][0, 0] == 1.0 + torch.tensor(0.1).bfloat16().item()
    for name in ("output", "prod", "same"):
        torch.testing.assert_close(got[name], want[name], rtol=0, atol=0, equal_nan=True, msg=name)
        assert torch.equal(got[name].signbit(), want[name].signbit()), name


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")   # numpy's, at 1e19
def test_gelu_grad_and_round_bf16_at_extreme_values_as_torch():
    """gelu_grad was NaN below x = -2e13 (its s·(x - x t) term, about 0.2 x^3, overflowed where Φ
    is 0: torch's is 0), and round_bf16 made a NaN whose mantissa is all ones (a GPU's canonical
    NaN) -0, the rounding's carry reaching the sign: both as torch's now."""
    x = torch.tensor([-1e19, -1e15, -2.5e13, -1e13, -30.0, -3.0, 0.0, 3.0, 30.0, 1e13, 1e19, math.nan])
    grad = coda.compile("EPILOGUE { output = gelu_grad(input); }").map(x.view(3, 4))["output"]
    leaf = x.clone().requires_grad_()
    torch.nn.functional.gelu(leaf, approximate="tanh").sum().backward()
    torch.testing.assert_close(grad.view(-1), leaf.grad, equal_nan=True)

    nans = torch.tensor([0x7FFFFFFF, -1, 0x7FC00000, 0x7F800001], dtype=torch.int32).view(torch.float32)
    got = coda.compile("EPILOGUE { output = round_bf16(input); }").map(nans.view(2, 2))["output"]
    assert got.isnan().all(), got


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_fused_program_with_every_output_kind(shape, dtype):
    m, n, k = shape
    prog = coda.compile("""
    EPILOGUE fused(bias: col, scale: row, residual: tile, p: scalar) {
      h = (input + bias) * scale;
      save preact = h;
      output = dropout(gelu(h), p) + residual;
      ss = row_sum(output * output);
      cs = col_sum(output);
      rmax = row_max(h);
      cmax = col_max(h);
      lse = row_logsumexp(h);
    }""")
    torch.manual_seed(3)
    a, b = torch.randn(m, k, dtype=dtype) / k**0.5, torch.randn(k, n, dtype=dtype)
    ops = dict(bias=torch.randn(n, dtype=dtype), scale=torch.rand(m, dtype=dtype) + 0.5,
               residual=torch.randn(m, n, dtype=dtype), p=0.3)
    out, ref = run_both(prog, a, b, seed=11, **ops)
    exact = prog.reference(a.double(), b.double(), seed=11,
                           **{key: v.double() if torch.is_tensor(v) else v for key, v in ops.items()})
    for key in prog.output_names:
        assert out[key].shape == exact[key].shape, key
        assert out[key].dtype == (dtype if key in ("output", "preact") else torch.float32), key
        assert rel(out[key], oracle.np64(exact[key])) < TOL[dtype], key
    for key in prog.output_names:   # a different dropout mask would be far off the reference
        assert rel(out[key], oracle.np64(ref[key])) < TOL[dtype], key


@pytest.mark.parametrize("shape", SHAPES)
def test_dropout_masks_match_the_reference_exactly(shape):
    m, n, k = shape
    prog = coda.compile("EPILOGUE(p: scalar) { output = dropout(input * 0.0 + 1.0, p); }")
    a, b = torch.randn(m, k), torch.randn(k, n)
    out, ref = run_both(prog, a, b, p=0.3, seed=2**31 + 7)
    assert torch.equal(out["output"], ref["output"])
    keep = oracle.dropout_mask_from_rng(2**31 + 7, 0.3, m, n)
    np.testing.assert_array_equal(oracle.np64(out["output"]), np.where(keep, 1 / 0.7, 0.0).astype(np.float32))


@pytest.mark.parametrize("p", [0.01, 0.1, 1 / 3, 0.9])
def test_dropout_scales_as_torch_bit_for_bit_on_both_backends(p):
    """A kept value is x times float32's 1 / (1 - p), rounded once, as torch's dropout and the
    kernels compute it; the reference divided, x / (1 - p), 1 ulp off in about a third of the
    kept float32 values."""
    prog = coda.compile("EPILOGUE(q: scalar) { output = dropout(input, q); }")
    x = torch.randn(64, 96, generator=torch.Generator().manual_seed(5))
    got = prog.map(x, q=p, seed=3, backend="triton")["output"]
    want = prog.map(x, q=p, seed=3, backend="reference")["output"]
    assert torch.equal(got, want)
    scale = 1 / (1 - torch.tensor(p, dtype=torch.float32))
    assert torch.equal(got, torch.where(got != 0, x * scale, 0.0))


@pytest.mark.parametrize("shape", SHAPES)
def test_dropout_masks_in_the_pair_domain_match_the_reference_exactly(shape):
    # after unpack the stream's columns are the pair domain's (0 .. N/2 - 1)
    m, n, k = shape
    prog = coda.compile("EPILOGUE(p: scalar) { g, u = unpack(input * 0.0 + 1.0);"
                        " output = dropout(g, p) * u; }")
    a, b = torch.randn(m, k), torch.randn(k, n)
    out, ref = run_both(prog, a, b, p=0.3, seed=11)
    assert torch.equal(out["output"], ref["output"])
    keep = oracle.dropout_mask_from_rng(11, 0.3, m, n // 2)
    np.testing.assert_array_equal(oracle.np64(out["output"]), np.where(keep, 1 / 0.7, 0.0).astype(np.float32))


def test_transposed_operands_need_no_copy():
    m, n, k = 50, 70, 40
    a = torch.randn(k, m).T          # column-major A
    b = torch.randn(n, k).T          # an nn.Linear weight used as W.T
    prog = coda.compile("EPILOGUE(bias: col) { output = relu(input + bias); }")
    bias = torch.randn(n)
    out = prog(a, b, backend="triton", bias=bias)["output"]
    want = np.maximum(oracle.np64(a) @ oracle.np64(b) + oracle.np64(bias), 0)
    assert rel(out, want) < 1e-5


def test_unpack_rope_and_accumulate():
    m, n, k = 37, 64, 24
    torch.manual_seed(4)
    a, b = torch.randn(m, k), torch.randn(k, n)
    acc = oracle.np64(a) @ oracle.np64(b)
    swiglu = coda.compile("EPILOGUE(rstd: row) { gate, up = unpack(input * rstd);"
                          " output = silu(gate) * up; s = col_sum(up); }")
    rstd = torch.rand(m) + 0.5
    out = swiglu(a, b, backend="triton", rstd=rstd)
    gate, up = oracle.unpack(acc * oracle.np64(rstd)[:, None])
    assert rel(out["output"], gate / (1 + np.exp(-gate)) * up) < 1e-5
    assert rel(out["s"], up.sum(0)) < 1e-5

    rope = coda.compile("EPILOGUE(cos: head, sin: head) { output = rope(input, cos, sin); }")
    cos, sin = torch.randn(m, 8), torch.randn(m, 8)
    out = rope(a, b, backend="triton", cos=cos, sin=sin)["output"]
    assert rel(out, oracle.rope(acc, oracle.np64(cos), oracle.np64(sin))) < 1e-5

    grad_acc = coda.compile("output += input * 0.5;")
    prior = torch.randn(m, n)
    target = prior.clone()
    result = grad_acc(a, b, backend="triton", out=target)["output"]
    assert result is target
    assert rel(target, oracle.np64(prior) + 0.5 * acc) < 1e-5


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_pack_to_twice_the_width_and_back(dtype):
    """pack(a, b) of [M, N] values: an [M, 2N] output, written into a poisoned out=; of the pairs
    from unpack: [M, N] again, usable in arithmetic."""
    m, n, k = 67, 50, 33
    torch.manual_seed(5)
    a, b = torch.randn(m, k, dtype=dtype), (torch.randn(k, n) / k**0.5).to(dtype)
    t = torch.randn(m, n, dtype=dtype)
    acc = oracle.np64(a) @ oracle.np64(b)
    wide = coda.compile("EPILOGUE(t: tile) { d = input * t; output = pack(d, input + 1.0);"
                        " s = row_sum(d); }")
    out = poisoned((m, 2 * n), dtype)
    got = wide(a, b, backend="triton", t=t, out=out)
    want = np.empty((m, 2 * n))
    want[:, 0::2], want[:, 1::2] = acc * oracle.np64(t), acc + 1.0
    assert got["output"] is out and rel(out, want) < TOL[dtype]
    assert rel(got["s"], (acc * oracle.np64(t)).sum(1)) < TOL[dtype]
    swap = coda.compile("g, u = unpack(input); output = pack(u, g) * 2.0;")
    want = np.empty((m, n))
    want[:, 0::2], want[:, 1::2] = 2 * acc[:, 1::2], 2 * acc[:, 0::2]
    assert rel(swap(a, b, backend="triton")["output"], want) < TOL[dtype]


def test_a_constant_of_both_domains_is_whole_where_pack_and_rope_read_it():
    """`1.0` is one node (CSE) that `input + 1.0` reads in [M, N] and pack or rope in the pair
    domain: each broadcasts it to a tile of its own domain (they once took the [M, N] tile's
    shape, and the kernel failed on the mismatch)."""
    m, n, k = 37, 68, 5
    a, b = oracle.launch_inputs(m, n, k, seed=6, dtype=torch.float32)
    g = torch.Generator().manual_seed(7)
    cos, sin = (oracle.random_values((m, 3), "any", g, torch.float32) for _ in range(2))
    gate = oracle.unpack(oracle.np64(a) @ oracle.np64(b))[0]
    packed = np.empty((m, n))
    packed[:, 0::2], packed[:, 1::2] = gate, 1.0
    rotated = oracle.rope(np.ones((m, n // 2)), oracle.np64(cos), oracle.np64(sin))
    cases = {"output = pack(g, 1.0);": packed, "output = g + rope(1.0, cos, sin);": gate + rotated}
    for body, want in cases.items():
        prog = coda.compile("EPILOGUE(cos: head, sin: head) { g, u = unpack(input); save s = input + 1.0; "
                            f"{body} }}")
        got = prog(a, b, backend="triton", cos=cos, sin=sin)
        assert rel(got["output"], want) < 1e-6, body
        assert rel(got["s"], oracle.np64(a) @ oracle.np64(b) + 1.0) < 1e-6, body


def test_out_dtype_scalar_tensor_and_poisoned_out():
    m, n, k = 33, 34, 35
    a, b = torch.randn(m, k, dtype=torch.float16), torch.randn(k, n, dtype=torch.float16)
    prog = coda.compile("EPILOGUE(alpha: scalar) { output = input * alpha; }")
    out = poisoned((m, n), torch.float32)
    prog(a, b, backend="triton", alpha=torch.tensor(0.25), out=out)
    assert torch.isfinite(out).all()
    assert rel(out, 0.25 * oracle.np64(a) @ oracle.np64(b)) < 1e-3
    half = prog(a, b, backend="triton", alpha=2.0, out_dtype=torch.float32)["output"]
    assert half.dtype == torch.float32


def test_maxima_keep_a_nan_as_torch_amax_does():
    """A NaN in a tile is the maximum of its row and column, in the tile's partial and through
    the finishing kernel's merge of several tiles' partials, as in the reference. Small integers:
    the GEMM is exact on both backends, so their maxima agree bit for bit (with normal values
    the two backends' sums differed in the last bit at times: a CI failure)."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    m, n, k = 70, 90, 8
    a, b = (torch.randint(-8, 9, shape, device=device).float() for shape in ((m, k), (k, n)))
    a[33, :] = float("nan")                      # row 33 and every column hold a NaN
    prog = coda.compile("output = input; r = row_max(input); c = col_max(input * w);")
    w = torch.ones(n, device=device)
    w[5] = float("nan")                          # and column 5 everywhere
    out, ref = run_both(prog, a, b, w=w)
    for name in ("r", "c"):
        assert torch.equal(out[name].isnan(), ref[name].isnan()), name
        assert torch.equal(out[name].nan_to_num(), ref[name].nan_to_num()), name
    assert out["r"].isnan().sum() == 1 and out["c"].isnan().all()


@pytest.mark.parametrize(("text", "formula"), [
    ("output = where(input > 0, input, log(0));", lambda acc: acc.where(acc > 0, -math.inf)),
    ("output = input * (1 / 0);", lambda acc: acc * math.inf),
    ("output = where(input > 0, input, sqrt(-1));", lambda acc: acc.where(acc > 0, math.nan)),
    ("output = input + round_fp16(70000);", lambda acc: acc + math.inf),
])
def test_constants_that_fold_to_inf_or_nan(text, formula):
    """A constant the compiler folds to an infinity or a NaN reaches the kernel as one (the
    kernel's source spells it `float('inf')`, not a bare name), as the reference computes it."""
    a, b = torch.randn(40, 24), torch.randn(24, 36)
    out = coda.compile(text)(a, b, backend="triton", out=poisoned((40, 36), torch.float32))["output"]
    want = formula(a.double() @ b.double())
    assert torch.equal(out.isnan(), want.isnan())
    torch.testing.assert_close(out.double().nan_to_num(), want.nan_to_num(), rtol=1e-4, atol=1e-4)


def test_row_logsumexp_of_a_row_holding_inf_is_inf():
    """A +inf among a row's values makes its log-sum-exp +inf, in the tile's partial and in the
    finishing kernel's merge (several column tiles), as torch.logsumexp; other rows unchanged."""
    a, b, t = torch.randn(40, 8), torch.randn(8, 70), torch.zeros(40, 70)
    t[7, 50] = math.inf
    t[9, 3] = math.inf                   # in the first column tile, merged with finite ones
    out = coda.compile("output = input + t; s = row_logsumexp(output);")(a, b, backend="triton", t=t)["s"]
    want = torch.logsumexp(a.double() @ b.double() + t.double(), dim=1)
    assert torch.equal(out.isinf(), want.isinf()) and out[7] == out[9] == math.inf
    torch.testing.assert_close(out.double().nan_to_num(posinf=0.0), want.nan_to_num(posinf=0.0),
                               rtol=1e-5, atol=1e-5)   # float32 sums against float64's


def test_runs_are_bit_identical_and_explain_shows_the_kernel():
    prog = coda.compile("EPILOGUE(p: scalar) { output = dropout(input, p); s = row_sum(output); }")
    a, b = torch.randn(70, 20), torch.randn(20, 90)
    first = prog(a, b, backend="triton", p=0.5, seed=5)
    second = prog(a, b, backend="triton", p=0.5, seed=5)
    assert all(torch.equal(first[key], second[key]) for key in first)
    other_seed = prog(a, b, backend="triton", p=0.5, seed=6)
    assert not torch.equal(first["output"], other_seed["output"])
    text = prog.explain(a, b, p=0.5, seed=5)
    assert "def coda_gemm_" in text and "cm.dropout" in text and "portable" in text


def test_triton_backend_refuses_float64_with_a_clear_error():
    prog = coda.compile("output = input;")
    a = torch.randn(4, 4, dtype=torch.float64)
    with pytest.raises(coda.LaunchError, match="float64"):
        prog(a, a, backend="triton")
    assert prog(a, a)["output"].dtype == torch.float64   # auto picks the reference for float64


def test_row_and_col_index_pick_a_target_column_per_row():
    m, n, k = 70, 90, 20
    prog = coda.compile("EPILOGUE(target: row) { gate, up = unpack(input);"
                        " picked = row_sum(where(col_index() == target, gate, 0.0));"
                        " rows = col_sum(row_index()); output = gate * (col_index() + 1.0); }")
    a, b = torch.randn(m, k), torch.randn(k, n)
    target = torch.randint(0, n // 2, (m,)).float()
    out, ref = run_both(prog, a, b, target=target)
    acc = oracle.np64(a) @ oracle.np64(b)
    want = acc[:, 0::2][np.arange(m), target.long().numpy()]
    assert rel(out["picked"], want) < 1e-6
    np.testing.assert_array_equal(oracle.np64(out["rows"]), np.full(n, m * (m - 1) / 2))  # adaptive: [N]
    with pytest.raises(coda.DslError, match="column domain"):
        coda.compile("gate, up = unpack(input); s = col_sum(col_index()); output = gate * col_index();")
    gate = acc[:, 0::2]
    assert rel(out["output"], gate * (np.arange(n // 2) + 1.0)) < 1e-6
    assert rel(ref["output"], gate * (np.arange(n // 2) + 1.0)) < 1e-6


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_map_runs_the_epilogue_on_an_existing_tensor(dtype):
    m, n = 70, 90
    prog = coda.compile("EPILOGUE(g: tile, p: scalar) { output = dropout(g, p) * gelu_grad(input);"
                        " db = col_sum(output); ss = row_sum(input * input); }")
    x, g = torch.randn(m, n, dtype=dtype), torch.randn(m, n, dtype=dtype)
    out = prog.map(x, backend="triton", g=g, p=0.2, seed=4)
    ref = prog.map(x, backend="reference", g=g, p=0.2, seed=4)
    keep = oracle.dropout_mask_from_rng(4, 0.2, m, n)
    xs, gs = oracle.np64(x), oracle.np64(g)
    want = np.where(keep, gs / 0.8, 0.0) * oracle.ELEMENTWISE["gelu_grad"][0](xs)
    assert rel(out["output"], want) < TOL[dtype]
    assert rel(out["db"], want.sum(0)) < TOL[dtype]
    assert rel(out["ss"], (xs * xs).sum(1)) < 1e-5
    for key in out:
        assert rel(out[key], oracle.np64(ref[key])) < TOL[dtype], key
    with pytest.raises(coda.LaunchError, match="X must be 2-D"):
        prog.map(x[0], g=g, p=0.2, seed=4)


def test_outputs_selects_what_is_written():
    m, n, k = 70, 100, 30
    prog = coda.compile("EPILOGUE(target: row) { output = input; lse = row_logsumexp(input);"
                        " t = row_sum(where(col_index() == target, input, 0.0)); }")
    a, b = torch.randn(m, k), torch.randn(k, n)
    target = torch.randint(0, n, (m,)).float()
    out = prog(a, b, backend="triton", target=target, outputs=["lse", "t"])
    assert sorted(out) == ["lse", "t"]
    source = prog.triton.kernel(prog.bind(a, b, target=target, outputs=["lse", "t"])).source
    assert "out_output" not in source          # the logits are never stored
    acc = oracle.np64(a) @ oracle.np64(b)
    assert rel(out["lse"], oracle.REDUCTIONS["row_logsumexp"](acc)) < 1e-6
    assert rel(out["t"], acc[np.arange(m), target.long().numpy()]) < 1e-6
    ref = prog(a, b, backend="reference", target=target, outputs=["t"])
    assert sorted(ref) == ["t"]
    with pytest.raises(coda.LaunchError, match="not an output"):
        prog(a, b, target=target, outputs=["logits"])
    with pytest.raises(coda.LaunchError, match="outputs= takes a list of output names, got 'lse'"):
        prog(a, b, target=target, outputs="lse")   # a name, not a list of names
    with pytest.raises(coda.LaunchError, match="must include 'output'"):
        coda.compile("output += input; s = row_sum(input);")(a, b, out=torch.zeros(m, n), outputs=["s"])


# (48, 70, 230): more K blocks than column blocks, so each tile of a row block sums several
@pytest.mark.parametrize("shape", [*SHAPES, (48, 70, 230)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_a_col_sums_from_the_k_loop(shape, dtype):
    """`a_col_sums=True`: each K block of A is summed by one tile of its row block, in turn, as
    the K loop loads it (rows past M and K masked), finished with the epilogue's own column sums."""
    m, n, k = shape
    prog = coda.compile("EPILOGUE(pre: tile) { output = input * pre; db = col_sum(output); }")
    a, b = oracle.launch_inputs(m, n, k, seed=3, dtype=dtype)
    pre = oracle.random_values((m, n), "real", torch.Generator().manual_seed(4), dtype)
    out = prog(a, b, backend="triton", pre=pre, a_col_sums=True)
    assert rel(out["a_col_sums"], oracle.np64(a).sum(0)) < 1e-6
    plain = prog(a, b, backend="triton", pre=pre)
    assert torch.equal(out["output"], plain["output"]) and torch.equal(out["db"], plain["db"])


def test_a_col_sums_of_a_gemm_with_no_columns():
    """With N = 0 no column tile runs, and A's column sums came back as the partial buffers'
    garbage (an audit's find): they are A's sums, finished or as one part."""
    a, b = torch.randn(40, 24), torch.randn(24, 0)
    prog = coda.compile("output = input;")
    for options in ({}, {"unfinished": ["a_col_sums"]}, {"m_limit": torch.tensor([9])}):
        sums = prog(a, b, backend="triton", a_col_sums=True, **options)["a_col_sums"]
        sums = sums.total() if isinstance(sums, coda.Partials) else sums
        rows = int(options["m_limit"]) if "m_limit" in options else 40
        torch.testing.assert_close(sums, a[:rows].sum(0))


@pytest.mark.parametrize("dim", [0, 1])
def test_a_col_sums_of_a_concat_and_a_transposed_a(dim):
    """Pieces along K (each piece's columns in their place) and along M (every piece's rows),
    and an A given transposed, stored as float16 (dtypes=), and under m_limit."""
    g = torch.Generator().manual_seed(5)
    pieces = ((torch.randn(70, 40, generator=g), torch.randn(70, 24, generator=g)) if dim == 1
              else (torch.randn(64, 40, generator=g), torch.randn(30, 40, generator=g)))
    joined = torch.cat(pieces, dim)
    b = torch.randn(joined.shape[1], 50, generator=g)
    prog = coda.compile("output = input;")
    out = prog(coda.Concat(pieces, dim), b, backend="triton", a_col_sums=True)
    assert rel(out["a_col_sums"], oracle.np64(joined).sum(0)) < 1e-6
    a = joined.T.contiguous().T   # K contiguous no more: the transposed layout
    out = prog(a, b, backend="triton", a_col_sums=True, dtypes={"a_col_sums": torch.float16},
               m_limit=torch.tensor([33]))
    assert out["a_col_sums"].dtype == torch.float16
    assert rel(out["a_col_sums"], oracle.np64(joined[:33]).sum(0)) < 1e-3


def test_a_launched_program_copies_and_pickles():
    """A program that has run its Triton kernel copies (copy.deepcopy) and pickles (torch.save of
    a module holding one) like a fresh one: its kernels and plans (generated modules, locks) are
    not part of it, and the copy builds its own at its first launch."""
    import copy
    import io
    import pickle

    prog = coda.compile("EPILOGUE(bias: col) { output = gelu(input + bias); s = row_sum(output); }")
    a, b, bias = torch.randn(40, 24), torch.randn(24, 36), torch.randn(36)
    first = prog(a, b, bias=bias, backend="triton")
    buffer = io.BytesIO()
    torch.save(prog, buffer)
    buffer.seek(0)
    twins = copy.deepcopy(prog), pickle.loads(pickle.dumps(prog)), torch.load(buffer, weights_only=False)
    for twin in twins:
        again = twin(a, b, bias=bias, backend="triton")
        assert all(torch.equal(again[k], first[k]) for k in first)
    assert prog._plans   # the original keeps its own


def test_a_program_on_ever_new_shapes_keeps_a_bounded_number_of_plans(monkeypatch):
    """Each new row count makes a plan (with its partial buffers); at MAX_PLANS the program
    drops them and starts over, and every launch's sums stay right."""
    from coda.runtime import program as program_module

    monkeypatch.setattr(program_module, "MAX_PLANS", 3)
    prog = coda.compile("EPILOGUE() { output = input; s = row_sum(input); }")
    b = torch.randn(16, 24)
    for m in range(5, 12):
        a = torch.randn(m, 16)
        got = prog(a, b, backend="triton")["s"]
        torch.testing.assert_close(got.double(), (a.double() @ b.double()).sum(1), rtol=1e-5, atol=1e-4)
        assert len(prog._plans) <= 3


def test_a_launch_past_32_bit_offsets_is_refused(monkeypatch):
    """The kernels' offsets are 32-bit: a tensor reaching past 2**31 - 1 elements (an output of
    65536 x 32768, a column slice of a very wide matrix) was read or written at wrapped offsets
    (under the interpreter, a segmentation fault). Such a launch is refused by name; the limit
    is lowered here so that small tensors reach it."""
    from coda.codegen import kernel

    prog = coda.compile("EPILOGUE (r: tile) { output = input + r; }")
    a, b = torch.randn(8, 4), torch.randn(4, 16)
    wide = torch.randn(8, 40)
    monkeypatch.setattr(kernel, "OFFSET_LIMIT", 200)
    cases = [(dict(r=torch.randn(8, 16)), "output spans 128"),   # fits
             (dict(r=wide[:, :16]), "operand 'r' spans 296 elements"),    # 7 * 40 + 16
             (dict(r=torch.randn(8, 16), out=torch.empty(8, 30)[:, :16]), "out= spans 226 elements")]
    for kwargs, message in cases:
        if "128" in message:
            torch.testing.assert_close(prog(a, b, backend="triton", **kwargs)["output"],
                                       a @ b + kwargs["r"], rtol=1e-5, atol=1e-5)
            continue
        with pytest.raises(coda.LaunchError, match=f"{message}, past the 200 .* split the launch"):
            prog(a, b, backend="triton", **kwargs)
    monkeypatch.setattr(kernel, "OFFSET_LIMIT", 100)   # a new shape: the checks run per plan
    with pytest.raises(coda.LaunchError, match="output 'output' spans 144 elements"):
        coda.compile("output = input;")(torch.randn(9, 4), b, backend="triton")
