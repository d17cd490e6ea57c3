"""Differential fuzzing of the Triton backend's launch features, on test_fuzz_triton.py's random
programs and float64 evaluation with its error bound: `m_limit` / `k_limit` (their values
changing between launches of one plan), `unfinished=` sums returned as `coda.Partials` and read
back by another program as row and column operands, A as a `coda.Concat` (along M or K, 1-4
pieces, transposed, read in place or joined), `a_col_sums`, `dtypes=` (fp16 and float64
reductions), the Hopper (TMA) mainloop forced in the interpreter, and launches that re-use a
program's cached plans with other operands: each example launches twice on one shape, each
launch with its own values, layouts (strides, storage offsets, so alignments), operand dtypes
and options, and both are checked (a cached plan must not keep anything that no longer
applies). Tile outputs go to NaN-poisoned `out=` buffers where the launch takes one: the rows
past `m_limit` must keep the poison.
"""

from __future__ import annotations

import itertools
import os

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import coda
from coda.codegen import kernel as kernel_module
from coda.codegen import tuning
from coda.codegen.tuning import Config
from coda.runtime.program import interpreter_enabled
from oracle import np64
from test_fuzz_triton import (
    BOUND_FACTOR,
    EVEN_SIZES,
    FUZZ,
    KINDS,
    SIZES,
    _evaluate,
    _operands,
    _program_text,
    _programs,
    compiled,
)

pytestmark = pytest.mark.skipif(not interpreter_enabled(), reason="needs TRITON_INTERPRET=1 on a CPU")

FEED_ROW = coda.compile("EPILOGUE feed_row(p: row) { output = input + p; }")
FEED_COL = coda.compile("EPILOGUE feed_col(q: col) { output = input + q; }")
#: Hopper configurations the interpreter runs quickly (the real ones' 128x256 tiles are slow there)
HOPPER_CONFIGS = [Config(64, 32, 32, 4, 3, split_epilogue=1), Config(64, 32, 32, 4, 3, split_epilogue=2),
                  Config(32, 64, 32, 4, 3, split_epilogue=2, flatten=False),
                  Config(64, 32, 32, 4, 3, stream_k=True)]
FP16_MAX = 3e4   # fp16 outputs are compared where they do not overflow (its range is small)
#: An example is two launches (and reads of their Partials): 8 take 5-25 s; CODA_FUZZ_EXAMPLES for more.
LAUNCH_FUZZ = settings(FUZZ, max_examples=int(os.environ.get("CODA_FUZZ_EXAMPLES", "8")))


def _strided(x: torch.Tensor, how: str) -> torch.Tensor:
    """x (same values) laid out as `how`: contiguous, column-major, shifted by one element
    (unaligned), or with a padded row stride (every other element of a vector)."""
    if how == "contiguous":
        return x.contiguous()
    if how == "transposed" and x.dim() == 2:
        return x.T.contiguous().T
    if how == "shifted":
        return torch.empty(x.numel() + 1, dtype=x.dtype)[1:].view(x.shape).copy_(x)
    if x.dim() == 2:   # padded rows
        return torch.empty(x.shape[0], x.shape[1] + 3, dtype=x.dtype)[:, 2:x.shape[1] + 2].copy_(x)
    return torch.empty(2 * x.numel() + 1, dtype=x.dtype)[1::2].view(x.shape).copy_(x)


def _concat(a: torch.Tensor, dim: int, cuts: list[int], transposed: bool):
    """A as a coda.Concat of its pieces cut at `cuts` along `dim` (given as the transposes'
    Concat, `.T`, when `transposed`)."""
    bounds = [0, *cuts, a.shape[dim]]
    pieces = [a.narrow(dim, lo, hi - lo) for lo, hi in itertools.pairwise(bounds)]
    if transposed:
        return coda.Concat([p.T.contiguous() for p in pieces], 1 - dim).T
    return coda.Concat([p.contiguous() for p in pieces], dim)


@st.composite
def _options(draw, prog, mode, m, k):
    """One launch's options: dtype, layouts, limits, A's form, sums, unfinished, dtypes."""
    names = [o.name for o in prog.ir.outputs]
    reductions = {o.name: o.reduction for o in prog.ir.outputs}
    gemm = mode != "map"
    dtype = draw(st.sampled_from([torch.float16] if mode == "hopper" else [torch.float32, torch.float16]))
    layouts = st.sampled_from(["contiguous", "transposed", "shifted", "padded"])
    opt = dict(dtype=dtype, out_fp32=draw(st.booleans()), operand_layouts=draw(st.lists(layouts, min_size=32,
               max_size=32)), operand_wide=draw(st.booleans()), b_layout=draw(layouts),
               a_layout=draw(layouts), out_layout=draw(layouts), poison_out=draw(st.booleans()))
    opt["m_limit"] = draw(st.one_of(st.none(), st.integers(0, m + 40)))
    opt["k_limit"] = draw(st.one_of(st.none(), st.integers(0, k + 40))) if gemm else None
    opt["a_col_sums"] = gemm and opt["k_limit"] is None and draw(st.booleans())
    form = draw(st.sampled_from(["tensor", "tensor", "concat"]))
    if form == "concat":
        cut = st.one_of(st.integers(0, 160), st.sampled_from([32, 64, 96, 128]))   # whole tiles, or not
        opt["concat"] = (draw(st.sampled_from([0, 1])), draw(st.lists(cut, max_size=3)), draw(st.booleans()))
    sums = [n for n in names if reductions[n] == "row_sum"]
    opt["unfinished"] = [n for n in sums if draw(st.booleans())]
    if opt["a_col_sums"] and opt["m_limit"] is None and draw(st.booleans()):
        opt["unfinished"].append("a_col_sums")
    opt["feed"] = draw(st.booleans())
    stored = {}
    for name in names:
        if name in opt["unfinished"] or (name == "output" and prog.ir.accumulates):
            continue
        choices = [None, torch.float32, torch.float16] + [torch.float64] * (reductions[name] is not None)
        choice = draw(st.sampled_from(choices))
        if choice is not None:
            stored[name] = choice
    if opt["a_col_sums"] and "a_col_sums" not in opt["unfinished"]:
        choice = draw(st.sampled_from([None, torch.float32, torch.float64, torch.float16]))
        if choice is not None:
            stored["a_col_sums"] = choice
    opt["dtypes"] = stored or None
    opt["subset"] = draw(st.integers(0, 2**16))
    opt["scalar_tensor"] = draw(st.booleans())
    return opt


def _launch(prog, statements, mode, m, n, k, heads, opt, seed, g):
    """Run one launch with the options `opt` on fresh values; check it against float64."""
    dtype = opt["dtype"]
    out_dtype = torch.float32 if opt["out_fp32"] else dtype
    a = torch.randint(-1, 2, (m, k), generator=g).to(dtype)
    b = torch.randint(-1, 2, (k, n), generator=g).to(dtype)
    x = torch.randint(-3, 4, (m, n), generator=g).to(dtype)
    ops = _operands(prog, m, n, heads, dtype, g)
    width = {"full": n, "half": n // 2, "double": 2 * n}[statements[-1][3]]
    stored = opt["dtypes"] or {}
    prior = torch.randn(m, width, generator=g, dtype=torch.float64).to(stored.get("output", out_dtype))

    names = [o.name for o in prog.ir.outputs]
    chosen = [name for i, name in enumerate(names)
              if (opt["subset"] >> i) & 1 or (name == "output" and prog.ir.accumulates)
              or name in opt["unfinished"] or name in (opt["dtypes"] or {})]
    outputs = chosen if chosen and chosen != names else None
    rows = m if opt["m_limit"] is None else min(opt["m_limit"], m)
    depth = k if opt["k_limit"] is None else min(opt["k_limit"], k)
    if rows == 0:   # a maximum over no rows: not compared
        assume(not any(o.reduction == "col_max" for o in prog.ir.outputs))

    # the float64 evaluation of the rows before the limit, at the depth before the limit
    inp = np64(x[:rows]) if mode == "map" else np64(a[:rows, :depth]) @ np64(b[:depth])
    env = {"input": (inp, 0.0), "prior": np64(prior[:rows])}
    for name, value in ops.items():
        value = np64(value)
        kind = KINDS[name]
        if kind in ("tile", "head"):
            value = value[:rows]
        env[name] = (value[:rows, None] if kind == "row" else value[None, :] if kind == "col" else value), 0.0
    with np.errstate(all="ignore"):
        want, bound = _evaluate(statements, env, rows, n, seed)
    tiles = [o.name for o in prog.ir.outputs if o.reduction is None]
    for name, value in want.items():
        assume(np.isfinite(value).all() and np.isfinite(bound[name]).all())
        fp16 = stored.get(name, out_dtype if name in tiles else torch.float32) == torch.float16
        assume(not fp16 or np.abs(value).max(initial=0) < FP16_MAX)

    # the launch, its tensors laid out as drawn
    layouts = iter(opt["operand_layouts"])
    kwargs = dict(backend="triton", seed=seed, outputs=outputs, out_dtype=out_dtype, dtypes=opt["dtypes"])
    for name, value in ops.items():
        if name == "s":
            kwargs[name] = value.float() if opt["scalar_tensor"] else float(value)
            continue
        if opt["operand_wide"]:   # operands in float32 or float64, which hold dtype's values
            value = value.to(torch.float64 if next(layouts) in ("shifted", "padded") else torch.float32)
        kwargs[name] = _strided(value, next(layouts))
    for option in ("m_limit", "k_limit"):
        if opt[option] is not None:
            index = torch.int32 if opt[option] % 2 else torch.int64
            kwargs[option] = torch.tensor([opt[option]], dtype=index)
    if opt["a_col_sums"]:
        kwargs["a_col_sums"] = True
    if opt["unfinished"]:
        kwargs["unfinished"] = opt["unfinished"]
    out = None
    if prog.ir.accumulates:
        out = _strided(prior, opt["out_layout"])
    elif opt["poison_out"] and (outputs is None or "output" in outputs):
        out = _strided(torch.full((m, width), float("nan"), dtype=prior.dtype), opt["out_layout"])
    source = x if mode == "map" else a
    first = source
    if "concat" in opt:
        dim, cuts, transposed = opt["concat"]
        length = source.shape[dim]
        cuts = sorted({c for c in cuts if 0 < c < length})
        first = _concat(source, dim, cuts, transposed)
    else:
        first = _strided(source, opt["a_layout"])
    if mode == "map":
        got = prog.map(first, out=out, **kwargs)
    else:
        got = prog(first, _strided(b, opt["b_layout"]), out=out, **kwargs)

    # the check
    context = f"{_program_text(statements)}\nmode {mode} m={m} n={n} k={k} opt {opt}"
    expected_names = (outputs or names) + ["a_col_sums"] * opt["a_col_sums"]
    assert list(got) == expected_names, context
    axes = {o.name: o.axis for o in prog.ir.outputs} | {"a_col_sums": "col"}
    if out is not None:
        assert got["output"] is out, context
        past = out[rows:]
        if prog.ir.accumulates:
            assert torch.equal(past, prior[rows:]), ("rows past m_limit changed", context)
        else:
            assert past.isnan().all(), ("rows past m_limit written", context)
    if opt["a_col_sums"]:
        sums = got["a_col_sums"]
        exact = np64(a[:rows]).sum(0)
        if isinstance(sums, coda.Partials):
            assert tuple(sums.shape) == (k,), context
            sums = sums.total()
        assert sums.dtype == stored.get("a_col_sums", torch.float32), context
        assert np.array_equal(np64(sums), exact), ("a_col_sums", np64(sums), exact, context)
    for name, tensor in got.items():
        if name == "a_col_sums":
            continue
        partials = isinstance(tensor, coda.Partials)
        assert partials == (name in opt["unfinished"]), (name, context)
        expected = want[name]
        tol = BOUND_FACTOR * bound[name]
        if partials:
            assert tuple(tensor.shape) == (m,), (name, context)
            if opt["feed"]:   # read back, added up on load, by a map as a row and as a column operand
                got_row = FEED_ROW.map(torch.zeros(m, 3), p=tensor, backend="triton")["output"][:rows]
                assert_close(got_row, np.repeat(expected[:, None], 3, 1), np.repeat(tol[:, None], 3, 1),
                             name, context + " (fed as a row)")
                got_col = FEED_COL.map(torch.zeros(2, m), q=tensor, backend="triton")["output"][:, :rows]
                assert_close(got_col, np.repeat(expected[None, :], 2, 0), np.repeat(tol[None, :], 2, 0),
                             name, context + " (fed as a column)")
            tensor = tensor.total()
        if axes[name] != "col":
            tensor = tensor[:rows]
        want_dtype = stored.get(name, out_dtype if name in tiles else torch.float32)
        assert tensor.dtype == (torch.float32 if partials else want_dtype), (name, tensor.dtype, context)
        if tensor.dtype == torch.float16:   # the stored value's rounding (and fp16's subnormals)
            tol = tol + 2.0**-11 * np.abs(expected) + 2.0**-25
        assert_close(tensor, expected, tol, name, context)


def assert_close(tensor, expected, tol, name, context):
    assert tensor.shape == expected.shape, (name, tensor.shape, expected.shape, context)
    error = np.abs(np64(tensor) - expected)
    bad = ~(error <= tol)
    assert not bad.any(), (f"{name} off at {np.argwhere(bad)[:5].tolist()}: got {np64(tensor)[bad][:5]}, "
                           f"want {expected[bad][:5]} (tol {tol[bad][:5]})\n{context}")


@LAUNCH_FUZZ
@given(st.data(), _programs(), st.integers(0, 2**32 - 1), st.integers(0, 2**16))
def test_launch_features_and_cached_relaunches_match_float64(data, statements, seed, data_seed):
    _, prog = compiled(statements)
    mode = data.draw(st.sampled_from(["portable", "portable", "map", "hopper"]))
    pairs = statements[0][0] == "unpack" or "'rope'" in repr(statements)
    n = data.draw(st.sampled_from(EVEN_SIZES if pairs else SIZES))
    if "'cosh'" in repr(statements) and n % 4:
        n += 2
    m, k = data.draw(st.sampled_from(SIZES)), data.draw(st.sampled_from(SIZES))
    heads = data.draw(st.integers(1, 4))
    g = torch.Generator().manual_seed(data_seed)
    config = data.draw(st.sampled_from(HOPPER_CONFIGS))
    with pytest.MonkeyPatch.context() as patch:
        if mode == "hopper":   # the sm_90 mainloop, forced: CODA picks it only on a Hopper GPU
            variant = kernel_module._variant

            def hopper_variant(launch):
                if launch.b is None or not all(map(kernel_module._tma_ok, (*launch.a_pieces, launch.b))):
                    return variant(launch)
                return "hopper"
            patch.setattr(kernel_module, "_variant", hopper_variant)
            patch.setattr(kernel_module, "_num_sms", lambda device: 3)
            patch.setattr(tuning, "INTERPRETER_CONFIG", config)
        for _ in range(2):   # the plan, then a launch of other operands that may find it cached
            opt = data.draw(_options(prog, mode, m, k))
            if mode == "hopper" and config.stream_k:   # one A tensor, no sums or limits
                opt.update(m_limit=None, k_limit=None, a_col_sums=False)
                opt.pop("concat", None)
                opt["unfinished"] = [u for u in opt["unfinished"] if u != "a_col_sums"]
                if opt["dtypes"]:
                    opt["dtypes"].pop("a_col_sums", None)
                    opt["dtypes"] = opt["dtypes"] or None
            _launch(prog, statements, mode, m, n, k, heads, opt, seed, g)
