"""The Hopper mainloop (persistent, TMA descriptors, split epilogue) run by the Triton interpreter.

CODA picks that mainloop only on an sm_90 GPU; the interpreter runs it too (tensor descriptors
included), so these tests force it on the CPU: ragged M, N and K, every epilogue split, TMA tile
operands and outputs, row/column reductions and the half-width domain, against a float64
evaluation. A ragged N leaves the last tile's last slices wholly past N: their reduction partials
must not be stored (they once were, past the end of the partial buffers).
"""

from __future__ import annotations

import pytest
import torch

import coda
from coda.codegen import kernel as kernel_module
from coda.codegen.tuning import Config
from coda.runtime.reference import evaluate

PROGRAMS = {
    "stats": "EPILOGUE(bias: col) { output = input + bias; ss = row_sum(output * output);"
             " lse = row_logsumexp(output); m = row_max(input); cs = col_sum(output); }",
    "residual": "EPILOGUE(residual: tile) { h = input + residual; save pre = input; output = gelu(h); }",
    "swiglu": "EPILOGUE(rstd: row) { gate, up = unpack(input * rstd); output = silu(gate) * up;"
              " s = row_sum(output); }",
    # pack to [M, 2N] (stored through pointers) next to a TMA output and a row sum
    "pack": "EPILOGUE(residual: tile) { d = input * residual; output = pack(d, input); save r = d;"
            " s = row_sum(d); }",
    # sums whose values are zero past the edges, left unmasked (passes/edges.py)
    "dgelu": "EPILOGUE(pre: tile) { output = input * gelu_grad(pre); db = col_sum(output);"
             " s = row_sum(output * pre); }",
}


def hopper_run(prog, a, b, config: Config, out=None, **operands):
    """A launch's Plan on the Hopper mainloop (forced; CODA would pick the portable one on a
    CPU) and a function that runs it."""
    launch = prog.bind(a, b, out=out, **operands)
    kernel = prog.triton._build(kernel_module._signature(launch, "hopper"), "hopper")
    plan = kernel_module.Plan(kernel, config, launch)
    return plan, lambda: plan.run(launch.a, launch.b, launch.values, launch.out, launch.seed)


def run_hopper(prog, a, b, split: int = 2, out=None, **operands) -> dict[str, torch.Tensor]:
    """One launch on the Hopper mainloop in 128x256 tiles, the epilogue in `split` slices."""
    return hopper_run(prog, a, b, Config(128, 256, 64, 8, 3, split_epilogue=split), out, **operands)[1]()


def rel(x: torch.Tensor, exact: torch.Tensor) -> float:
    return ((x.double() - exact).norm() / exact.norm()).item()


@pytest.fixture(autouse=True)
def _interpreter_only(monkeypatch):
    if torch.cuda.is_available():
        pytest.skip("runs the Hopper mainloop in the Triton interpreter (CPU machines)")
    monkeypatch.setattr(kernel_module, "_num_sms", lambda device: 3)   # a few persistent programs


@pytest.mark.parametrize("split", [1, 2, 4])
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_hopper_mainloop_matches_float64(name, split):
    prog = coda.compile(PROGRAMS[name])
    m, n, k = 200, 300, 72          # ragged in all three; 300 = 256 + 44: slices past N
    torch.manual_seed(split)
    a = torch.randn(m, k, dtype=torch.float16)
    w = (torch.randn(n, k) / k**0.5).to(torch.float16)
    operands = {"bias": torch.randn(n, dtype=torch.float16),
                "residual": torch.randn(m, n, dtype=torch.float16),
                "pre": torch.randn(m, n, dtype=torch.float16),
                "rstd": torch.rand(m) + 0.5}
    operands = {p: v for p, v in operands.items() if p in prog.ir.params}
    got = run_hopper(prog, a, w.T, split, **operands)
    exact = evaluate(prog.bind(a.double(), w.T.double(), **{p: v.double() for p, v in operands.items()}))
    assert set(got) == set(exact)
    for key, value in got.items():
        assert rel(value, exact[key]) < 2e-3, key   # fp16 outputs: ~5e-4; float32 sums: ~1e-7


@pytest.mark.parametrize("a_layout", ["k_contiguous", "m_contiguous"])
@pytest.mark.parametrize("b_layout", ["linear_weight", "conv1d_weight"])
def test_hopper_mainloop_layouts_and_accumulation(a_layout, b_layout):
    """A as [M, K] or a transposed [K, M] buffer; B as an nn.Linear weight's .T (K-contiguous) or
    a Conv1D weight [K, N] (N-contiguous, GPT-2's layout); `output +=` into a strided out=."""
    prog = coda.compile("EPILOGUE(bias: col) { output += input + bias; }")
    m, n, k = 136, 264, 80
    torch.manual_seed(0)
    a = torch.randn(m, k, dtype=torch.float16)
    a = a if a_layout == "k_contiguous" else a.T.contiguous().T
    w = (torch.randn(n, k) / k**0.5).to(torch.float16)
    b = w.T if b_layout == "linear_weight" else w.T.contiguous()
    bias = torch.randn(n, dtype=torch.float16)
    start = torch.randn(m, n + 8, dtype=torch.float16)[:, :n]   # row stride n + 8
    out = start.clone()
    run_hopper(prog, a, b, out=out, bias=bias)
    exact = start.double() + a.double() @ b.double() + bias.double()
    assert rel(out, exact) < 2e-3


def test_padded_out_of_a_ragged_width_is_written_by_tma():
    """An `out=` whose width is not a multiple of 16 bytes (GPT-2's 50257-column logits block)
    but whose row stride is (rows padded) leaves through TMA stores, which write its columns and
    nothing of the padding."""
    prog = coda.compile("EPILOGUE(bias: col) { output = input + bias; lse = row_logsumexp(output); }")
    m, n, k = 150, 203, 48          # 203 bf16/fp16 columns: 406 bytes a row
    torch.manual_seed(3)
    a = torch.randn(m, k, dtype=torch.float16)
    w = (torch.randn(n, k) / k**0.5).to(torch.float16)
    bias = torch.randn(n, dtype=torch.float16)
    buffer = torch.full((m, 208), float("nan"), dtype=torch.float16)   # poison, padding included
    out = buffer[:, :n]
    launch = prog.bind(a, w.T, out=out, bias=bias)
    assert "out_output" in kernel_module._signature(launch, "hopper").tma
    assert "out_output" not in kernel_module._signature(prog.bind(a, w.T, bias=bias), "hopper").tma
    got = run_hopper(prog, a, w.T, 2, out=out, bias=bias)
    exact = evaluate(prog.bind(a.double(), w.T.double(), bias=bias.double()))
    assert got["output"].data_ptr() == out.data_ptr()
    assert rel(out, exact["output"]) < 2e-3
    assert rel(got["lse"], exact["lse"]) < 1e-5
    assert buffer[:, n:].isnan().all()   # the padding is not written


@pytest.mark.parametrize("tile", [(128, 256, 2), (64, 32, 1)])
@pytest.mark.parametrize("name", ["stats", "residual"])
def test_stream_k_matches_float64(name, tile):
    """Stream-K: 3 programs share the tiles' K blocks in equal runs, so tiles are cut between
    runs (128x256: 4 tiles of 16 K blocks in runs of 21-22; 64x32: one tile of 13 K blocks in
    runs of 4-5, the middle one inside it) and the run holding a tile's start adds the others'
    partials. Poisoned outputs; launched twice, the second launch finding the flags the first
    lowered."""
    prog = coda.compile(PROGRAMS[name])
    block_m, block_n, split = tile
    m, n, k = (200, 300, 1000) if block_m == 128 else (64, 32, 832)
    torch.manual_seed(block_n)
    a = torch.randn(m, k, dtype=torch.float16)
    w = (torch.randn(n, k) / k**0.5).to(torch.float16)
    operands = {"bias": torch.randn(n, dtype=torch.float16),
                "residual": torch.randn(m, n, dtype=torch.float16)}
    operands = {p: v for p, v in operands.items() if p in prog.ir.params}
    exact = evaluate(prog.bind(a.double(), w.T.double(), **{p: v.double() for p, v in operands.items()}))
    out = torch.full((m, n), float("nan"), dtype=torch.float16)
    config = Config(block_m, block_n, 64, 4, 3, split_epilogue=split, stream_k=True)
    plan, run = hopper_run(prog, a, w.T, config, out, **operands)
    assert plan.grid == (3,)
    for _ in range(2):
        got = run()
        assert set(got) == set(exact)
        for key, value in got.items():
            assert rel(value, exact[key]) < 2e-3, key
        flags = plan._partials(a.device)[kernel_module.STREAM_K_PARTIALS][1]
        assert flags.tolist() == [0, 0, 0]   # every flag raised was lowered by its reader
        out.fill_(float("nan"))


def test_stream_k_accumulates_into_transposed_operands():
    """A weight gradient's layout (A = dyᵀ, a transposed view; B = x) with `output +=` into out=:
    each tile's epilogue runs once, after its runs' partials are added."""
    prog = coda.compile("EPILOGUE { output += input; }")
    m, n, k = 96, 80, 700
    torch.manual_seed(5)
    dy, x = torch.randn(k, m, dtype=torch.float16), torch.randn(k, n, dtype=torch.float16) / k**0.5
    start = torch.randn(m, n, dtype=torch.float16)
    out = start.clone()
    hopper_run(prog, dy.T, x, Config(64, 64, 64, 4, 3, stream_k=True), out)[1]()
    assert rel(out, start.double() + dy.T.double() @ x.double()) < 2e-3


def test_stream_k_layer_norm_weight_gradient():
    """LayerNorm's folded weight gradient (`ln_dw`: dyᵀ @ xhat with the norm's gains and two
    column sums in its epilogue), GPT-2's c_attn launch in small, in stream-K."""
    from coda.ops.norms import LN_DW

    t, n_out, n_in = 640, 128, 64   # 2 tiles of 10 K blocks in 3 runs of 6-7
    torch.manual_seed(6)
    half = dict(dtype=torch.float16)
    dy, xhat = torch.randn(t, n_out, **half), torch.randn(t, n_in, **half) / t**0.5
    operands = dict(g=torch.randn(n_in, **half), beta=torch.randn(n_in, **half),
                    db=torch.randn(n_out, **half), w=torch.randn(n_out, n_in, **half))
    got = hopper_run(LN_DW, dy.T, xhat, Config(64, 64, 64, 4, 3, stream_k=True), **operands)[1]()
    exact = evaluate(LN_DW.bind(dy.T.double(), xhat.double(), **{k: v.double() for k, v in operands.items()}))
    for key in exact:
        assert rel(got[key], exact[key]) < 2e-3, key


def test_stream_k_takes_one_a_tensor_without_column_sums_or_limits():
    prog = coda.compile("EPILOGUE { output = input; }")
    a, w = torch.randn(64, 96, dtype=torch.float16), torch.randn(32, 96, dtype=torch.float16)
    config = Config(64, 32, 64, 4, 3, stream_k=True)
    with pytest.raises(coda.CodaError, match="stream-K"):
        hopper_run(prog, a, w.T, config, a_col_sums=True)
    with pytest.raises(coda.CodaError, match="stream-K"):
        hopper_run(prog, a, w.T, config, k_limit=torch.tensor([64]))
    with pytest.raises(coda.CodaError, match="stream-K"):
        hopper_run(prog, coda.Concat([a[:, :64], a[:, 64:]], 1), w.T, config)
