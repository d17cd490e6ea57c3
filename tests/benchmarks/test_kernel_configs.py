"""benchmarks/kernel_configs.py runs end to end on the CPU (`--smoke`: tiny float32 shapes through
the Triton interpreter, untimed): every map agrees with itself across all map tiles, every LLaMA
GEMM and every GEMM of a tiny GPT-2's training step launches in its heuristic configuration, and
the sm90 suite compiles two of them for sm_90 (a subprocess without the interpreter)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import BENCHMARKS, load_script


def test_smoke_runs_both_suites(tmp_path):
    script = load_script("kernel_configs")
    rows = script.main(["maps", "--smoke"])
    assert len(rows) == 13
    assert not any(isinstance(v, str) and v.startswith("WRONG") for row in rows for v in row.values())
    path = tmp_path / "llama.json"
    script.main(["llama", "--smoke", "--json", str(path)])
    written = json.loads(path.read_text())
    assert [row["case"] for row in written["rows"]][:2] == ["swiglu_grad", "gated_dx"]
    assert all(row["heuristic"] == 0.0 for row in written["rows"])   # ran, untimed
    picked = script.main(["llama", "--smoke", "--cases", "gated_dx,norm_dw"])
    assert [row["case"] for row in picked] == ["gated_dx", "norm_dw"]


def test_gpt2_suite_records_the_gemms_of_a_training_step():
    """The tiny GPT-2's step (2 layers, hidden 64, vocab 512, 2 x 32 tokens): its LayerNorm-folded
    q/k/v, out projections, fc1 + GELU, LM head, and their backward GEMMs, each launched (the
    folded LayerNorm's backward GEMMs are plain: dy @ w at the norm's output, 64x64x192, and
    the weight gradient, 192x64x64)."""
    rows = load_script("kernel_configs").main(["gpt2", "--smoke"])
    cases = {row["case"] for row in rows}
    assert {"ln_linear_64x192x64", "linear_gelu_64x256x64", "linear_identity_64x64x256",
            "ce_forward_64x512x64", "plain_64x64x192", "plain_192x64x64"} <= cases
    assert all(row["heuristic"] == 0.0 and row["cublas"] == 0.0 for row in rows)   # ran, untimed
    # every fused launch beside CODA's plain GEMM of its A and B (the tiny LM head's dW is plain)
    assert all(("coda_plain" in row) == (not row["case"].startswith(("plain_", "accumulate_")))
               for row in rows)


def test_sm90_suite_compiles_without_a_gpu(tmp_path):
    pytest.importorskip("triton.backends.nvidia", reason="this Triton has no NVIDIA backend")
    path = tmp_path / "sm90.json"
    done = subprocess.run([sys.executable, str(BENCHMARKS / "kernel_configs.py"), "sm90", "--smoke",
                           "--json", str(path)], env=dict(os.environ, TRITON_INTERPRET="0"),
                          capture_output=True, text=True, timeout=600)
    if done.returncode != 0 and "ptxas" in done.stderr.lower():
        pytest.skip(f"Triton cannot run ptxas here: {done.stderr[-300:]}")
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(path.read_text())["rows"]
    assert [row["case"] for row in rows] == ["swiglu_grad", "gated_dx"]
    assert all(row["shared"] > 0 and row["registers"] > 0 for row in rows)
