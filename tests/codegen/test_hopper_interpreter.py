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
}


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
                "rstd": torch.rand(m) + 0.5}
    operands = {p: v for p, v in operands.items() if p in prog.ir.params}
    launch = prog.bind(a, w.T, **operands)
    kernel = prog.triton._build(kernel_module._signature(launch, "hopper"), "hopper")
    plan = kernel_module.Plan(kernel, Config(128, 256, 64, 8, 3, split_epilogue=split), launch)
    got = plan.run(launch.a, launch.b, launch.values, None, launch.seed)
    exact = evaluate(prog.bind(a.double(), w.T.double(), **{p: v.double() for p, v in operands.items()}))
    assert set(got) == set(exact)
    for key, value in got.items():
        err = ((value.double() - exact[key]).norm() / exact[key].norm()).item()
        assert err < 2e-3, (key, err)   # fp16 outputs: ~5e-4; float32 reductions: ~1e-7
