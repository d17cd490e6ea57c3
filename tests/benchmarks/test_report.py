"""benchmarks/report.py: the micro benchmark's tables and the plots, from hand-made JSON results
(no GPU): every op gets a row per size, the speed-up is the best peer's time over CODA's, and
implementations or fields a run did not measure show as "—"."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

PNG = b"\x89PNG\r\n\x1a\n"


def row(op, size, impl, ms, **extra):
    return dict(op=op, size=size, impl=impl, pass_="fwd_bwd", ms=ms, gemm_floor_ms=0.1,
                over_floor=ms / 0.1, **extra)


@pytest.fixture()
def results(tmp_path: Path) -> Path:
    rows = [row("linear_gelu", "gpt2", "eager", 0.5, graph_ms=0.55, kernels=7),
            row("linear_gelu", "gpt2", "compile", 0.9),
            row("linear_gelu", "gpt2", "coda", 0.25, graph_ms=0.5, kernels=7),
            row("swiglu_mlp", "gpt2", "eager", 1.2, kernels=20),
            row("swiglu_mlp", "gpt2", "liger", 1.0),
            row("swiglu_mlp", "gpt2", "coda", 2.0, kernels=10),
            dict(op="qkv_rope", size="gpt2", error="RuntimeError('failed')")]
    (tmp_path / "micro.json").write_text(json.dumps(dict(results=rows)))
    train = [dict(model="gpt2", mode=mode, tokens_per_s=tps) for mode, tps in (("eager", 2e5), ("coda", 3e5))]
    (tmp_path / "train.json").write_text(json.dumps(dict(rows=train)))
    return tmp_path


def test_micro_tables(report, results):
    lines = report.micro_tables(results).splitlines()
    header = next(line for line in lines if line.startswith("| op |"))
    assert header.split(" | ")[2:6] == ["eager", "compile", "liger", "coda"]
    gelu = next(line for line in lines if line.startswith("| linear_gelu |"))
    assert gelu.split(" | ")[1:] == ["100", "500", "900", "—", "250", "2.00×", "550", "500", "7 / 7 |"]
    swiglu = next(line for line in lines if line.startswith("| swiglu_mlp |"))
    assert "| 0.50× |" in swiglu and swiglu.endswith("| — | — | 20 / 10 |")
    assert not any(line.startswith("| qkv_rope |") for line in lines)   # a failed case has no row


def test_plots(report, results, tmp_path):
    out = tmp_path / "img"
    out.mkdir()
    report.micro_plots(results, out)
    report.train_plot(results, out)
    for name in ("micro_gpt2.png", "train_throughput.png"):
        assert (out / name).read_bytes().startswith(PNG)
