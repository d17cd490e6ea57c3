"""benchmarks/kernel_configs.py runs end to end on the CPU (`--smoke`: tiny float32 shapes through
the Triton interpreter, untimed): every map agrees with itself across all map tiles, every LLaMA
GEMM launches in its heuristic configuration, and the sm90 suite compiles two of them for sm_90
(a subprocess without the interpreter)."""

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
