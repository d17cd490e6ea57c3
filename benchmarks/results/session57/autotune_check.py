"""Autotuning on the GPU (CODA_AUTOTUNE=1, the users' default; the GPU tests run with it off):
a program with a tile operand (the shared-buffer configurations among the candidates) and one
without, tuned at GPT-2's fc1 shape, their outputs against float32 PyTorch.

    CODA_AUTOTUNE=1 CODA_CACHE_DIR=$(mktemp -d) python benchmarks/results/session57/autotune_check.py
"""

import sys
import time
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parents[3] / "src")]
import coda  # noqa: E402

m, n, k = 16384, 3072, 768
a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k**0.5
r = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
exact = a.float() @ w.float().T
for source, ops, ref in (("EPILOGUE(r: tile) { output = input + r; }", dict(r=r), exact + r.float()),
                         ("output = input * 2;", {}, exact * 2)):
    prog = coda.compile(source)
    began = time.time()
    out = prog(a, w.T, **ops)["output"]
    launch = prog.bind(a, w.T, **ops)
    config = prog.triton.config(launch, prog.triton.kernel(launch))
    error = ((out.float() - ref).abs().max() / ref.abs().max()).item()
    print(f"{source}: tuned in {time.time() - began:.0f} s to {config}; max error {error:.2e}", flush=True)
    assert error < 1e-2
