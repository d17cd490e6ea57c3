"""benchmarks/kernel_configs.py runs end to end on the CPU (`--smoke`: tiny float32 shapes through
the Triton interpreter, untimed): every map agrees with itself across all map tiles, and every
LLaMA GEMM launches in its heuristic configuration."""

from __future__ import annotations

import json

from conftest import load_script


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
