"""benchmarks/micro.py's bookkeeping, on hand-made rows (no GPU): CODA's speed-up is over the
fastest peer that ran, a row prints as the line the stage log shows, and the compile modes
follow --no-compile and --max-autotune."""

from __future__ import annotations

import argparse

import pytest

from conftest import load_script


@pytest.fixture(scope="module")
def micro():
    return load_script("micro")


def row(impl, ms, pass_="fwd_bwd", **extra):
    return dict(op="linear_gelu", size="gpt2", impl=impl, pass_=pass_, ms=ms, gemm_floor_ms=0.1,
                over_floor=ms / 0.1, **extra)


def test_the_speed_up_is_over_the_fastest_peer_that_ran(micro):
    rows = [row("eager", 0.5), row("compile", 0.4), row("coda", 0.2), row("eager", 0.45, pass_="fwd"),
            row("liger", 0.3, pass_="fwd"), row("coda", 0.25, pass_="fwd"),
            dict(row("cublaslt", 0.1), error="RuntimeError()")]
    rows[-1].pop("ms")
    summary = {s["pass_"]: s for s in micro.summarize(rows)}
    assert summary["fwd_bwd"]["best_peer"] == "compile"
    assert summary["fwd_bwd"]["speedup_vs_best"] == pytest.approx(2.0)
    assert summary["fwd_bwd"]["speedup_vs_eager"] == pytest.approx(2.5)
    assert summary["fwd"]["best_peer"] == "liger"
    assert summary["fwd"]["speedup_vs_best"] == pytest.approx(1.2)
    assert summary["fwd"]["speedup_vs_eager"] == pytest.approx(1.8)


def test_the_replayed_speed_up_uses_graphs_and_kernel_time_for_what_cannot_be_captured(micro):
    rows = [row("eager", 0.5, graph_ms=0.45, kernel_us=400.0), row("compile", 0.4, graph_ms=0.35),
            row("liger", 0.3, kernel_us=300.0), row("coda", 0.6, graph_ms=0.25, kernel_us=240.0),
            row("coda", 0.2, pass_="fwd"), row("eager", 0.1, pass_="fwd")]
    (replayed,) = micro.summarize_replayed(rows)
    assert (replayed["best_peer"], replayed["best_peer_timed"]) == ("liger", "kernels")
    assert replayed["speedup_vs_best"] == pytest.approx(1.2)
    rows[1]["graph_ms"] = 0.2
    (replayed,) = micro.summarize_replayed(rows)
    assert (replayed["best_peer"], replayed["best_peer_timed"]) == ("compile", "graph")
    assert replayed["speedup_vs_best"] == pytest.approx(0.8)
    rows[3].pop("graph_ms")   # CODA not replayed: no comparison
    assert micro.summarize_replayed(rows) == []
    assert micro.geomean([]) == 1.0


def test_rows_print_as_the_stage_log_shows_them(micro):
    timed = row("coda", 0.2, kernel_us=150.0, kernels=6, graph_ms=0.16, peak_mem_gb=0.25)
    assert micro.row_line(timed) == ("linear_gelu            gpt2     coda          fwd_bwd      "
                                     "200.0us   2.00x gemm floor  gpu    150.0us in   6 kernels, "
                                     "graph    160.0us, peak 0.25 GB")
    failed_peer = dict(op="linear_gelu", size="gpt2", impl="liger", pass_="fwd", error="OOM")
    assert micro.row_line(failed_peer).endswith("liger         fwd      ERROR OOM")
    failed_case = dict(op="linear_gelu", size="gpt2", error="timed out after 900 s")
    assert micro.row_line(failed_case).endswith("gpt2     FAILED timed out after 900 s")


def test_compile_modes(micro):
    args = argparse.Namespace(no_compile=False, max_autotune="gpt2")
    assert micro.compile_modes("gpt2", args) == ["default", "max-autotune-no-cudagraphs"]
    assert micro.compile_modes("llama7b", args) == ["default"]
    args.no_compile = True
    assert micro.compile_modes("gpt2", args) == []
