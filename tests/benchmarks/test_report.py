"""benchmarks/report.py: the micro benchmark's tables and the plots, from hand-made JSON results
(no GPU): every op gets a row per size, the speed-up is the best peer's time over CODA's, the
headroom the best peer's time over the GEMM floor, and implementations or fields a run did not
measure show as "—"."""

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
    (tmp_path / "train.json").write_text(json.dumps(dict(date="2026-11-29T10:00:00+00:00", rows=train)))
    return tmp_path


def test_micro_tables(report, results):
    lines = report.micro_tables(results).splitlines()
    header = next(line for line in lines if line.startswith("| op |"))
    assert header.split(" | ")[2:6] == ["eager", "compile", "liger", "coda"]
    gelu = next(line for line in lines if line.startswith("| linear_gelu |"))
    # CODA / best = 0.5 / 0.25; best / floor = 0.5 / 0.1 (the most anyone can gain over eager)
    assert gelu.split(" | ")[1:] == ["100", "500", "900", "—", "250", "2.00×", "5.00×", "550", "500",
                                     "7 / 7 |"]
    swiglu = next(line for line in lines if line.startswith("| swiglu_mlp |"))
    assert "| 0.50× | 10.00× |" in swiglu and swiglu.endswith("| — | — | 20 / 10 |")
    assert not any(line.startswith("| qkv_rope |") for line in lines)   # a failed case has no row


def test_replayed_table(report, results):
    """Graph replays where measured, else a peer's kernel time (marked *); no row where CODA
    has no replay."""
    lines = report.micro_tables(results).splitlines()
    start = next(i for i, line in enumerate(lines) if "replayed from CUDA graphs" in line)
    replayed = [line for line in lines[start:] if line.startswith("| linear_gelu |")]
    assert replayed == ["| linear_gelu | 550 | — | — | 500 | 1.10× |"]
    assert not any(line.startswith("| swiglu_mlp |") for line in lines[start:])


def test_plots(report, results, tmp_path):
    out = tmp_path / "img"
    out.mkdir()
    report.micro_plots(results, out)
    report.train_plot(results, out)
    for name in ("micro_gpt2.png", "train_throughput.png"):
        assert (out / name).read_bytes().startswith(PNG)


def test_train_table_takes_the_latest_run_of_each_model_and_mode(report, results):
    older = [dict(model="gpt2", mode="coda", tokens_per_s=4e5),
             dict(model="bert", mode="eager", tokens_per_s=1e5)]
    # the file name sorts after train.json, the date before it
    (results / "train_rest.json").write_text(json.dumps(dict(date="2026-11-28T10:00:00+00:00", rows=older)))
    assert report.train_table(results) == {("gpt2", "coda"): 300.0, ("bert", "eager"): 100.0,
                                           ("gpt2", "eager"): 200.0}
    # a later session's run, in its own folder, supersedes what it measured
    (results / "session10").mkdir()
    later = [dict(model="gpt2", mode="eager", tokens_per_s=2.5e5)]
    (results / "session10" / "train_final.json").write_text(
        json.dumps(dict(date="2026-12-01T12:00:00+00:00", rows=later)))
    assert report.train_table(results)[("gpt2", "eager")] == 250.0


def test_gemm_table_holds_the_best_coda_time_to_its_best_plain_time(report, tmp_path):
    def g(shape, case, impl, ms):
        return dict(shape=shape, case=case, impl=impl, ms=ms)

    short, long_ = [16384, 3072, 768], [8192, 8192, 8192]
    rows = [g(short, "plain", "coda", 0.120), g(short, "plain", "coda_pingpong", 0.115),
            g(short, "plain", "cublas", 0.114),
            g(short, "bias_gelu", "coda", 0.140), g(short, "bias_gelu", "coda_pingpong", 0.126),
            g(short, "bias_gelu", "coda_pingpong/128x128x64s4e2", 0.126),
            g(short, "bias_gelu", "cublaslt", 0.133),
            g(long_, "plain", "coda", 1.0), g(long_, "plain", "cublas", 1.0),
            g(long_, "bias_gelu", "coda", 1.06)]
    path = tmp_path / "gemm.json"
    path.write_text(json.dumps(dict(results=rows)))
    table = {tuple(line.split(" | ")[:2]): line.split(" | ") for line in report.gemm_table(path).splitlines()}
    gelu = table[("| 16384×3072×768", "bias_gelu")]
    assert gelu[2:9] == ["114", "140", "126", "1.10 ✓", "≤ 1.10", "133", "— |"]   # 126 / 115
    assert table[("| 8192×8192×8192", "bias_gelu")][5:7] == ["1.06 ✗", "≤ 1.05"]
    assert ("| 16384×3072×768", "plain") in table and len(table) == 6   # header, rule, 4 rows


def test_gemm_table_prefers_the_back_to_back_ratio(report, tmp_path):
    shape = [16384, 3072, 768]
    rows = [dict(shape=shape, case="plain", impl="coda", ms=0.120),
            dict(shape=shape, case="plain", impl="cublas", ms=0.114),
            dict(shape=shape, case="residual", impl="coda", ms=0.150),   # 1.25 of the best times
            dict(shape=shape, case="residual", impl="cublaslt", ms=0.148),
            dict(shape=shape, case="residual", impl="coda_over_plain_paired", ratio=1.08,
                 ratios=[1.07, 1.08, 1.2]),
            dict(shape=shape, case="residual", impl="cublaslt_over_cublas_paired", ratio=1.26,
                 ratios=[1.25, 1.26, 1.27])]
    path = tmp_path / "gemm.json"
    path.write_text(json.dumps(dict(results=rows)))
    line = next(line for line in report.gemm_table(path).splitlines() if "residual" in line)
    assert line.split(" | ")[5] == "1.08 ✓"
    assert line.split(" | ")[7] == "148 (1.26)"   # the vendor's fused form over its plain GEMM


def test_step_breakdown_of_the_profiled_rows(report, tmp_path):
    """One row (and bar) per profiled (model, mode) of one run, by model; unprofiled rows have none."""
    parts = dict(gemm=5000.0, attention=4000.0, coda=12000.0, optimizer=600.0, other=1400.4,
                 total=23000.4, launches=517, top=[])
    rows = [dict(model="gpt2", mode="coda+graph", tokens_per_s=6e5, breakdown=parts),
            dict(model="gpt2", mode="compile", tokens_per_s=4e5, breakdown=None),
            dict(model="bert", mode="eager", tokens_per_s=4e5, breakdown={**parts, "coda": 0.0})]
    path = tmp_path / "train.json"
    path.write_text(json.dumps(dict(date="2026-12-04T10:00:00+00:00", rows=rows)))
    lines = report.breakdown_table(path).splitlines()
    assert lines[2:] == ["| bert | eager | 5,000 | 4,000 | 0 | 600 | 1,400 | 23,000 | 517 |",
                         "| gpt2 | coda+graph | 5,000 | 4,000 | 12,000 | 600 | 1,400 | 23,000 | 517 |"]
    report.breakdown_plot(path, tmp_path)
    assert (tmp_path / "train_breakdown.png").read_bytes().startswith(PNG)


def test_speedup_plot_takes_each_models_latest_paired_ratio(report, results):
    summary = [dict(op="linear_gelu", size="gpt2", speedup_vs_best=1.16)]
    micro = json.loads((results / "micro.json").read_text())
    (results / "micro.json").write_text(json.dumps({**micro, "summary_replayed": summary}))
    ratio = dict(baseline="compile+graph", median=1.19, min=1.18, max=1.22, rounds=[1.19])
    runs = (("2026-12-03", 1.17, "train_old.json"), ("2026-12-04", 1.19, "train_new.json"))
    for date, median, name in runs:
        run = dict(date=f"{date}T10:00:00+00:00", rows=[],
                   paired_ratios={"gpt2": {"coda+graph": {**ratio, "median": median}}})
        (results / name).write_text(json.dumps(run))
    ratios = report.model_ratios(results)
    assert list(ratios) == ["gpt2"] and ratios["gpt2"]["median"] == 1.19
    assert ratios["gpt2"]["source"] == "train_new.json"
    out = results / "img"
    out.mkdir()
    report.speedup_plot(results, out)
    assert (out / "speedup.png").read_bytes().startswith(PNG)


def test_plots_of_one_gpu_leave_the_other_gpus_runs_out(report, results):
    """--gpu H200: a later H100 run supersedes neither a model's ratio nor the ops' speed-ups,
    a probe of a few ops does not stand for the whole suite, and a variant tree's rate is not
    CODA's."""
    ratio = dict(baseline="compile+graph", min=1.1, max=1.3, rounds=[1.2])

    def run(date: str, gpu: str, **fields) -> str:
        return json.dumps(dict(date=f"{date}T10:00:00+00:00", gpu=gpu, **{"rows": [], **fields}))
    suite = [dict(op=op, size="gpt2", speedup_vs_best=1.0) for op in ("a", "b", "c")]
    (results / "train_h200.json").write_text(
        run("2026-12-04", "NVIDIA H200", paired_ratios={"gpt2": {"coda+graph": {**ratio, "median": 1.199}}},
            rows=[dict(model="gpt2", mode="coda+graph", tokens_per_s=6e5),
                  dict(model="gpt2", mode="coda+graph@variant", tokens_per_s=7e5)]))
    (results / "train_h100.json").write_text(
        run("2026-12-07", "NVIDIA H100 80GB HBM3",
            paired_ratios={"gpt2": {"coda+graph": {**ratio, "median": 1.215}}}))
    (results / "micro_suite.json").write_text(run("2026-12-04", "NVIDIA H200", summary_replayed=suite))
    (results / "micro_probe.json").write_text(run("2026-12-05", "NVIDIA H200", summary_replayed=suite[:1]))
    (results / "micro_h100.json").write_text(run("2026-12-06", "NVIDIA H100 80GB HBM3",
                                                 summary_replayed=suite * 2))
    assert report.model_ratios(results, "H200")["gpt2"]["median"] == 1.199
    assert report.model_ratios(results)["gpt2"]["median"] == 1.215
    assert report.train_table(results, "H200") == {("gpt2", "coda+graph"): 600.0}   # no variant tree
    assert report.replayed_ops(results, "H200") == suite
    assert report.replayed_ops(results) == suite * 2
    out = results / "img"
    out.mkdir()
    report.speedup_plot(results, out, "H200")
    assert (out / "speedup.png").read_bytes().startswith(PNG)
