"""benchmarks/train.py --smoke: the end-to-end training benchmark runs on the CPU (tiny GPT-2, LLaMA and BERT,
float32, eager and CODA, a 5-step loss curve), and its kernel classification is right.

The benchmark runs in a subprocess, as CI would run it, with TRITON_INTERPRET=0: CODA's reference backend
(conftest.py switches the interpreter on for the kernel tests; through it the smoke run takes minutes, and
tests/integrations/test_hf.py already checks coda.patch through the interpreter). About 30 s.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "train.py"
PNG = b"\x89PNG\r\n\x1a\n"
#: Same init, same batches, float32: CODA rounds once per fused GEMM + epilogue, eager HF once per op.
#: The losses measured ~2e-7 apart (relative) over three steps.
RTOL = 1e-5


def run_smoke(path: Path, autotune: str, *options: str) -> dict:
    """The smoke run; CODA_AUTOTUNE=0 starts a model's runs side by side (as run_all.sh does),
    autotuning on runs them one after the other."""
    done = subprocess.run([sys.executable, str(SCRIPT), "--smoke", "--json", str(path), *options],
                          env={**os.environ, "TRITON_INTERPRET": "0", "CODA_AUTOTUNE": autotune},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(path.read_text())


@pytest.fixture(scope="module")
def result(tmp_path_factory) -> dict:
    # LLaMA and BERT warm up as one group, as run_all.sh has them
    return run_smoke(tmp_path_factory.mktemp("train") / "train.json", "0", "--models", "gpt2,llama+bert")


def test_runs_one_after_the_other_when_autotuning(tmp_path):
    rows = run_smoke(tmp_path / "train.json", "1", "--models", "bert", "--curve", "none")["rows"]
    assert [(r["model"], r["mode"]) for r in rows] == [("bert", "eager"), ("bert", "coda")]
    assert all(r["error"] is None and len(r["losses"]) == 4 for r in rows), rows


def assert_close(a: list[float], b: list[float]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert math.isfinite(x) and math.isfinite(y)
        assert abs(x - y) <= RTOL * abs(y), (a, b)


def test_every_model_runs_eager_and_coda_with_equal_losses(result):
    order = [(m, mode) for m in ("gpt2", "llama", "bert") for mode in ("eager", "coda")]
    assert [(r["model"], r["mode"]) for r in result["rows"]] == order
    rows = {(r["model"], r["mode"]): r for r in result["rows"]}
    for row in rows.values():
        assert row["error"] is None, row
        # 1 warm-up, 1 after waiting for its turn (the allocator refilled), 2 timed
        assert len(row["losses"]) == 4 and row["loss"] == row["losses"][-1]
        assert row["tokens_per_s"] > 0 and (row["batch"], row["seq"]) == (2, 32)
    for model in ("gpt2", "llama", "bert"):
        assert_close(rows[model, "coda"]["losses"], rows[model, "eager"]["losses"])
    assert set(result["ratios"]) == {"gpt2", "llama", "bert"}
    for key in ("gpu", "torch", "triton", "transformers", "coda", "date", "command"):
        assert result[key], key


def test_gemma_runs_eager_and_coda_with_equal_losses(tmp_path):
    """--models gemma (not in the default set): the tiny Gemma trains patched as eager does."""
    rows = run_smoke(tmp_path / "train.json", "0", "--models", "gemma", "--curve", "none")["rows"]
    assert [(r["model"], r["mode"]) for r in rows] == [("gemma", "eager"), ("gemma", "coda")]
    assert all(r["error"] is None for r in rows), rows
    assert_close(rows[1]["losses"], rows[0]["losses"])


def test_loss_curve_and_png(result):
    curve = result["curve"]
    assert curve["error"] is None, curve
    assert set(curve["losses"]) == {"eager", "eager_math_attention", "coda"}
    assert len(curve["losses"]["eager"]) == 5
    assert_close(curve["losses"]["coda"], curve["losses"]["eager"])
    assert_close(curve["losses"]["eager_math_attention"], curve["losses"]["eager"])
    assert Path(curve["png"]).read_bytes().startswith(PNG)


@pytest.mark.parametrize("kernel, expected", [
    ("coda_gemm_linear_gelu", "coda"),
    ("coda_map_ln_stats", "coda"),
    ("pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 64, 4, false>, true>", "attention"),
    ("fmha_cutlassB_bf16_aligned_64x64_k64_sm80", "attention"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x64", "attention"),
    ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT", "gemm"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1", "gemm"),
    ("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8>", "gemm"),
    ("void splitKreduce_kernel<32, 16, int, float, __nv_bfloat16>", "gemm"),
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<FusedAdamMathFunctor>", "optimizer"),
    ("triton_poi_fused_add_native_layer_norm_0", "other"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>", "other"),
])
def test_kernel_classes(bench, kernel, expected):
    assert bench.classify(kernel) == expected


def test_idle_time_is_charged_to_the_kernel_that_ran_last(bench):
    """Idle stretches between kernels, counted once where kernels overlap (a memset beside a
    GEMM), each charged to the kernel that ended last before it."""
    from types import SimpleNamespace

    def kernel(name, start, end):
        return SimpleNamespace(name=name, time_range=SimpleNamespace(start=start, end=end))

    spans = [kernel("gemm", 0, 10), kernel("memset", 2, 4), kernel("finish", 13, 20),
             kernel("gemm", 21, 30), kernel("finish", 34, 35)]
    assert dict(bench.idle_time(spans)) == {"gemm": 3 + 4, "finish": 1}
    assert dict(bench.idle_time(spans[::-1])) == {"gemm": 7, "finish": 1}
    assert bench.idle_time([]) == {}


def test_the_ratio_is_over_the_fastest_peer_graphed_compile_included(bench):
    """compile+graph is a peer (torch.compile with the step captured, as coda+graph is): CODA's
    ratio is over it when it is the fastest, and it runs through torch.compile."""
    rows = [dict(model="gpt2", mode=mode, tokens_per_s=rate, error=None) for mode, rate in
            (("eager", 2e5), ("compile", 4.8e5), ("compile+graph", 5e5), ("coda+graph", 6e5))]
    assert bench.ratios(rows)["gpt2"] == {"baseline": "compile+graph", "coda+graph": 1.2}
    assert bench.compiles("compile+graph") and not bench.compiles("eager+graph")


def test_pad_mm_always_pads_the_compiled_modes_only(bench, monkeypatch):
    """--pad-mm always reaches each child and sets Inductor's force_shape_pad in the compiled
    modes (torch.compile's fast GPT-2 step), never in the others; the default leaves it alone."""
    import torch._inductor.config as inductor_config

    monkeypatch.setattr(inductor_config, "force_shape_pad", False)
    for mode, pad_mm in (("coda+graph", "always"), ("eager", "always"), ("compile", "timed")):
        bench.pad_misaligned_gemms(mode, pad_mm)
        assert inductor_config.force_shape_pad is False, mode
    bench.pad_misaligned_gemms("compile+graph", "always")
    assert inductor_config.force_shape_pad is True
    args = bench.parse_args(["--pad-mm", "always", "--models", "gpt2"])
    monkeypatch.setattr(bench.side_by_side, "Child", lambda command, *a, **k: command)
    command = bench.start("gpt2:compile", args)
    assert command[command.index("--pad-mm") + 1] == "always"


def test_rounds_time_each_run_again_and_pair_the_ratios(tmp_path):
    """--rounds 3: each run is timed three times (its rate the median), and CODA's rate is also
    divided by the fastest peer's round by round."""
    result = run_smoke(tmp_path / "train.json", "0", "--models", "gpt2", "--curve", "none", "--rounds", "3")
    rows = {r["mode"]: r for r in result["rows"]}
    for row in rows.values():
        assert row["error"] is None, row
        rates = [r["tokens_per_s"] for r in row["rounds"]]
        assert len(rates) == 3 and row["tokens_per_s"] == sorted(rates)[1]
        # 1 warm-up, then per round 1 step after waiting for its turn and 2 timed
        assert len(row["losses"]) == 1 + 3 * 3
    paired = result["paired_ratios"]["gpt2"]["coda"]
    assert paired["baseline"] == "eager"
    expected = [ours["tokens_per_s"] / theirs["tokens_per_s"]
                for ours, theirs in zip(rows["coda"]["rounds"], rows["eager"]["rounds"], strict=True)]
    assert paired["rounds"] == pytest.approx(expected)
    assert paired["min"] <= paired["median"] <= paired["max"]


@pytest.mark.parametrize("runs", [1, 2, 3])
def test_each_run_takes_each_place_in_a_round_equally_often(bench, runs):
    """With the rounds a multiple of the runs, every run is first, second, ... as often as the
    others; the last round (taken in the group's order) closes the cycle."""
    names = list("abc"[:runs])
    rounds = 2 * runs
    orders = [*bench.first_rounds(names, rounds), names]
    assert len(orders) == rounds and all(sorted(order) == names for order in orders)
    for place in range(runs):
        assert sorted(order[place] for order in orders) == sorted(names * 2)
    assert bench.first_rounds(names, 1) == []


def test_paired_ratios_use_the_peer_fastest_by_median(bench):
    def row(mode, *rates):
        rounds = [dict(tokens_per_s=rate) for rate in rates]
        return dict(model="gpt2", mode=mode, error=None, tokens_per_s=sorted(rates)[1], rounds=rounds)
    rows = [row("compile", 4.0, 5.0, 4.1), row("compile+graph", 4.4, 4.6, 4.5),
            row("coda+graph", 5.5, 5.0, 5.4)]
    paired = bench.paired_ratios(rows)["gpt2"]["coda+graph"]
    assert paired["baseline"] == "compile+graph"
    assert paired["rounds"] == pytest.approx([5.5 / 4.4, 5.0 / 4.6, 5.4 / 4.5])
    assert paired["median"] == pytest.approx(5.4 / 4.5)


def test_a_tree_runs_each_coda_mode_with_its_coda(tmp_path):
    """--tree NAME=PATH: every CODA mode once more, as mode@NAME, importing coda from PATH (here a
    copy of src/coda), timed beside the others; its losses are main's, as the code is, up to the
    last digits: on a loaded CI machine two processes of the same code once read losses a few
    units in the last place apart (a CPU BLAS may split a GEMM by the threads it finds free)."""
    import shutil

    tree = tmp_path / "tree"
    shutil.copytree(SCRIPT.parents[1] / "src" / "coda", tree / "coda")
    rows = run_smoke(tmp_path / "train.json", "0", "--models", "bert", "--curve", "none",
                     "--tree", f"copy={tree}")["rows"]
    assert [r["mode"] for r in rows] == ["eager", "coda", "coda@copy"]
    by_mode = {r["mode"]: r for r in rows}
    assert all(r["error"] is None for r in rows), rows
    assert Path(by_mode["coda@copy"]["coda_from"]) == tree / "coda"
    assert Path(by_mode["coda"]["coda_from"]) == SCRIPT.parents[1] / "src" / "coda"
    assert_close(by_mode["coda@copy"]["losses"], by_mode["coda"]["losses"])


@pytest.mark.parametrize("tree", ["nopath", "a@b=src", "x=/nonexistent"])
def test_a_bad_tree_is_refused(tree):
    done = subprocess.run([sys.executable, str(SCRIPT), "--smoke", "--tree", tree],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--tree" in done.stderr, done.stderr
