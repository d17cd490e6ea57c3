"""The tuning store and autotuner, without a GPU: a fake timer stands in for CUDA events."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import torch
import triton.testing

import coda
from coda.codegen import tuning
from coda.codegen.tuning import Config, TuningStore


def test_store_round_trip_and_persistence(tmp_path):
    store = TuningStore(tmp_path / "tuning.json")
    config = Config(128, 256, 64, 8, 3, split_epilogue=2)
    store.put("key", config)
    assert store.get("key") == config
    assert TuningStore(tmp_path / "tuning.json").get("key") == config   # a second process


@pytest.mark.parametrize("garbage", [
    "{not json", "[1, 2]", '{"key": {"block_m": "x", "bogus": 1}}', '{"key": 5}', "null",
    # valid JSON whose entry is no configuration that could run: Config(block_m="128") reached
    # Plan's arithmetic (a TypeError), block_m 0 a ZeroDivisionError, and a pingpong of "no" is
    # truthy (an audit's find)
    '{"key": {"block_m": "128", "block_n": 128, "block_k": 64}}',
    '{"key": {"block_m": 0, "block_n": 128, "block_k": 64}}',
    '{"key": {"block_m": 128, "block_n": 128, "block_k": 64, "num_warps": 3}}',
    '{"key": {"block_m": 128, "block_n": 128, "block_k": 64, "pingpong": "no"}}',
    '{"key": {"block_m": 128, "block_n": 128, "block_k": true}}',
    '{"key": {"block_m": 128, "block_n": 128}}',
])
def test_corrupt_cache_file_is_survived(tmp_path, garbage):
    path = tmp_path / "tuning.json"
    path.write_text(garbage)
    store = TuningStore(path)
    assert store.get("key") is None
    store.put("other", Config(64, 64, 32))
    assert TuningStore(path).get("other") == Config(64, 64, 32)


def test_store_is_safe_under_threads(tmp_path):
    store = TuningStore(tmp_path / "tuning.json")
    def config(i: int) -> Config:   # 16 distinct ones
        return Config(16 << i % 4, 16 << i // 4, 32)

    threads = [threading.Thread(target=lambda i=i: store.put(f"k{i}", config(i))) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    fresh = TuningStore(tmp_path / "tuning.json")
    assert all(fresh.get(f"k{i}") == config(i) for i in range(16))


def _put_one(path: str, key: str, ready) -> None:   # a process of its own
    ready.wait()
    TuningStore(Path(path)).put(key, Config(64, 64, 32))


def test_two_processes_each_storing_a_key_keep_both(tmp_path):
    """Each process merges its entry into the file as it is then (DDP's ranks tuning at once):
    the last writer had rewritten the file from what it read first, dropping the other's."""
    import multiprocessing

    path = tmp_path / "tuning.json"
    seen = TuningStore(path)
    assert seen.get("rank0") is None   # read before either wrote
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Event()
    procs = [ctx.Process(target=_put_one, args=(str(path), f"rank{i}", ready)) for i in range(2)]
    for p in procs:
        p.start()
    ready.set()
    for p in procs:
        p.join(60)
    assert all(TuningStore(path).get(f"rank{i}") == Config(64, 64, 32) for i in range(2))
    assert seen.get("rank1") == Config(64, 64, 32)   # a key not seen before is read again


def test_the_store_follows_coda_cache_dir_set_after_import(tmp_path, monkeypatch):
    """The tuning file lives where CODA_CACHE_DIR says when it is used, as the kernel files do."""
    store = TuningStore()
    monkeypatch.setenv("CODA_CACHE_DIR", str(tmp_path))
    store.put("key", Config(64, 64, 32))
    assert (tmp_path / "tuning.json").exists() and TuningStore().get("key") == Config(64, 64, 32)


def test_autotune_picks_the_fastest_skips_broken_and_reports_progress(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(tuning, "STORE", TuningStore(tmp_path / "tuning.json"))
    candidates = tuning.CANDIDATES["hopper"]
    fastest = candidates[2]
    clock = iter(range(1000))
    monkeypatch.setattr(tuning.time, "perf_counter", lambda: next(clock) * 1.5)

    def fake_bench(fn, **kwargs):
        fn()
        return 1.0 if fn.__defaults__[0] == fastest else 2.0

    def run(config):
        if config == candidates[0]:
            raise RuntimeError("out of shared memory")

    monkeypatch.setattr(triton.testing, "do_bench", fake_bench)
    assert tuning.autotune("k", candidates, run, "demo 1x2x3") == fastest
    err = capsys.readouterr().err
    assert "coda: tuning demo 1x2x3" in err and "skipped (RuntimeError)" in err
    # Cached: a second call does not time anything.
    monkeypatch.setattr(triton.testing, "do_bench", lambda *a, **k: pytest.fail("re-tuned"))
    assert tuning.autotune("k", candidates, run, "demo") == fastest


@pytest.mark.parametrize("variant", ["hopper", "portable"])
@pytest.mark.parametrize("shape", [(16384, 3072, 768), (512, 512, 64), (48, 128256, 4096)])
def test_the_heuristic_picks_a_candidate(variant, shape):
    """Its choice is one of the tuned candidates (fallbacks walk that list)."""
    assert tuning.heuristic(variant, *shape) in tuning.CANDIDATES[variant]


def test_the_hopper_heuristic_takes_the_pingpong_kernel_for_short_k():
    gpt2_fc1, llama_up = (16384, 3072, 768), (8192, 11008, 4096)
    assert tuning.heuristic("hopper", *gpt2_fc1).mainloop("hopper") == "pingpong"
    assert tuning.heuristic("hopper", *gpt2_fc1, pingpong=False).mainloop("hopper") == "hopper"
    assert tuning.heuristic("hopper", *llama_up).mainloop("hopper") == "hopper"
    assert tuning.heuristic("portable", *gpt2_fc1).mainloop("portable") == "portable"


def test_an_a_in_pieces_along_k_takes_the_pingpong_kernel_at_any_k():
    """GPT-2's LayerNorm dxhat GEMM reads the q/k/v gradients in place (K = 2304 in three pieces):
    the ping-pong kernel, unless the program cannot run in it; pieces along M change nothing."""
    ln_dxhat = (16384, 768, 2304)
    assert tuning.heuristic("hopper", *ln_dxhat).mainloop("hopper") == "hopper"
    assert tuning.heuristic("hopper", *ln_dxhat, pieces_along_k=True).mainloop("hopper") == "pingpong"
    assert tuning.heuristic("hopper", *ln_dxhat, pingpong=False, pieces_along_k=True).pingpong is False


def test_a_launch_that_sums_a_takes_the_pingpong_kernel_at_any_k():
    """BERT's q/k/v dx with its bias gradient (`a_col_sums=True`, K = 2304): the Triton kernel
    would read A's tiles twice."""
    qkv_dx = (16384, 768, 2304)
    assert tuning.heuristic("hopper", *qkv_dx, sums_a=True).mainloop("hopper") == "pingpong"
    assert tuning.heuristic("hopper", *qkv_dx, pingpong=False, sums_a=True).pingpong is False


def test_the_hopper_heuristic_weighs_the_last_wave():
    """128x256 tiles where there are enough and their waves are full; 128x128 where those fill
    the persistent kernel's last wave much better (192 wide tiles: 2 waves of 132, 73% full)."""
    assert tuning.heuristic("hopper", 16384, 5632, 2048).block_n == 256    # 2816 tiles, 97%
    assert tuning.heuristic("hopper", 5632, 2048, 16384).block_n == 256    # 352 tiles, 89% either way
    assert tuning.heuristic("hopper", 3072, 2048, 16384).block_n == 128    # 192 tiles
    assert tuning.heuristic("hopper", 2304, 768, 16384).block_n == 128     # too few for 132 SMs


def test_a_launch_under_a_row_limit_takes_128x128_tiles():
    """Under m_limit fewer rows than M run (BERT's skipping dx GEMM: 2458 of 16384): 128x128
    tiles, a candidate, where the full M would take 128x256; short K keeps the ping-pong kernel."""
    bert_dx = (16384, 768, 30522)
    assert tuning.heuristic("hopper", *bert_dx).block_n == 256
    limited = tuning.heuristic("hopper", *bert_dx, limited=True)
    assert (limited.block_m, limited.block_n, limited.pingpong) == (128, 128, False)
    assert limited in tuning.CANDIDATES["hopper"]
    assert tuning.heuristic("hopper", 16384, 30522, 768, limited=True).pingpong


def test_a_packed_output_takes_the_pingpong_kernel_with_shared_operand_buffers():
    """A program storing pack(...) [M, 2N] (LLaMA's SwiGLU gradient, with its two tile operands)
    takes the ping-pong kernel at any K, its operand buffers shared by the warpgroups; a tuning
    candidate, as every choice is; the Triton kernel's 128x128 tiles where the ping-pong kernel
    cannot run it (a program that reads its prior output)."""
    llama_swiglu_grad = (16384, 5632, 2048)
    assert tuning.heuristic("hopper", *llama_swiglu_grad).block_n == 256
    for shape in (llama_swiglu_grad, (16384, 3072, 768)):
        packed = tuning.heuristic("hopper", *shape, packs=True)
        assert packed.pingpong and packed.share_tiles and packed in tuning.CANDIDATES["hopper"]
    packed = tuning.heuristic("hopper", *llama_swiglu_grad, pingpong=False, packs=True)
    assert (packed.block_m, packed.block_n, packed.pingpong) == (128, 128, False)


def test_a_pingpong_config_gives_the_gluon_kernel_its_ring_depth_and_register_split():
    config = tuning.Config(128, 128, 64, 4, 5, split_epilogue=4, pingpong=True)
    meta = config.meta("pingpong")
    assert meta["STAGES"] == 5 and "num_stages" not in meta and meta["EPILOGUE_SPLIT"] == 4
    # two 4-warp MMA warpgroups and a loader warp share 168 registers a thread on average
    assert (2 * meta["MMA_REGS"] + meta["LOAD_REGS"]) / 3 == meta["maxnreg"]
    assert config.epilogue_block_n == 32


def test_a_program_that_reads_its_prior_output_never_gets_the_pingpong_kernel():
    """The ping-pong kernel cannot read `out=` back (its outputs leave through shared memory):
    an accumulating program is tuned, defaulted and falls back among the other kernels only."""
    accumulate = coda.compile("EPILOGUE acc() { output += input; }")
    assert accumulate.triton.pingpong is False
    assert coda.compile("output = input;").triton.pingpong is True
    kept = tuning.candidates("hopper", pingpong=False)
    assert kept and not any(c.pingpong for c in kept)
    assert len(kept) < len(tuning.candidates("hopper"))
    assert tuning.heuristic("hopper", 16384, 3072, 768, pingpong=False) in kept


MAP_TILES = coda.compile("EPILOGUE map_tiles(p: scalar) { output = dropout(input, p);"
                         " s = row_sum(output); cs = col_sum(output); cm = col_max(input); }")


@pytest.mark.parametrize("tile", sorted(tuning.MAP_CONFIGS))
def test_every_map_tile_gives_the_reference_results(tile):
    """Each map tile shape (chosen on a GPU by what a map writes) through the interpreter, at a
    ragged shape with several partials per row and per column (for the wide tile, wide enough to
    have whole column blocks besides the ragged last one)."""
    from coda.codegen.kernel import Plan

    shape = (300, 1100) if tuning.MAP_CONFIGS[tile].block_n > 200 else (300, 200)
    x = torch.randn(shape, generator=torch.Generator().manual_seed(4))
    poisoned = torch.full_like(x, float("nan"))
    launch = MAP_TILES.bind(x, None, p=0.25, seed=3, out=poisoned)
    plan = Plan(MAP_TILES.triton.kernel(launch), tuning.MAP_CONFIGS[tile], launch)
    out = plan.run(launch.a, None, launch.values, poisoned, launch.seed)
    want = MAP_TILES.map(x.double(), p=0.25, seed=3, backend="reference")
    for name, t in out.items():
        torch.testing.assert_close(t.double(), want[name], rtol=1e-5, atol=1e-4, msg=name)


def test_limited_and_summing_launches_are_tuned_apart():
    """A launch under m_limit / k_limit ran on fewer rows (or less depth) than its shape says,
    one with `a_col_sums` reads more: each keeps its configuration under a key of its own."""
    from coda.codegen.kernel import _layout

    prog = coda.compile("EPILOGUE p() { output = input; }")
    a, b = torch.randn(64, 32), torch.randn(32, 16)
    keys = {_layout(prog.bind(a, b, **options)) for options in (
        {}, {"m_limit": torch.tensor([8])}, {"k_limit": torch.tensor([8])}, {"a_col_sums": True})}
    assert len(keys) == 4


def test_a_map_over_a_wide_ragged_row_takes_wide_tiles():
    """Only a tile-writing map across a wide row whose width is not a whole number of the
    default tile's columns (the cross-entropy's gradient over 50257 columns) takes 16x512."""
    configs = tuning.MAP_CONFIGS
    assert tuning.map_config(True, False, 50257) == configs["wide ragged tile"]
    assert tuning.map_config(True, False, 30522) == configs["wide ragged tile"]
    assert tuning.map_config(True, False, 32000) == configs["tile"]      # a whole number of tiles
    assert tuning.map_config(True, False, 770) == configs["tile"]        # narrow
    assert tuning.map_config(True, True, 50257) == configs["tile+col"]
    assert tuning.map_config(False, False, 50257) == configs["sums"]


@pytest.mark.parametrize("source, tiles, tries", [
    ("EPILOGUE(g: tile, u: tile) { output = pack(input * g, input * u); }", ("g", "u"),
     [(5, False), (5, True), (4, False), (3, False)]),
    ("output = input * 2;", (), [(5, False), (4, False), (3, False)]),
])
def test_a_pingpong_config_that_does_not_fit_is_tried_with_shared_buffers_then_shallower_rings(
        monkeypatch, source, tiles, tries):
    """Shared memory runs out (OutOfResources at launch) for a ping-pong configuration whose
    epilogue stages several tile operands beside the ring: the same configuration with its
    operand buffers shared (where there are tile operands), then 4 and 3 deep come before the
    other candidates."""
    from triton.runtime.errors import OutOfResources

    from coda.codegen.kernel import TritonProgram

    prog = coda.compile(source)
    chosen = Config(128, 128, 64, 4, 5, split_epilogue=2, pingpong=True)
    tried = []

    class Plan:
        def __init__(self, config):
            self.config = config

        def run(self, *args):
            tried.append(self.config)
            if self.config.num_stages > 3 or not self.config.pingpong or self.config.share_tiles:
                raise OutOfResources(262488, 232448, "shared memory")
            return {"output": "ran"}

    monkeypatch.setattr(TritonProgram, "config", lambda self, launch, kernel: chosen)
    monkeypatch.setattr(TritonProgram, "plan", lambda self, launch, config: Plan(config))
    a, w = torch.randn(64, 32), torch.randn(48, 32)
    plan, outputs = prog.triton.start(prog.bind(a, w.T, **{name: torch.randn(64, 48) for name in tiles}))
    assert outputs == {"output": "ran"} and plan.config.num_stages == 3
    assert [(c.num_stages, c.share_tiles) for c in tried] == tries
    assert all(c == Config(128, 128, 64, 4, c.num_stages, split_epilogue=2, pingpong=True,
                           share_tiles=c.share_tiles) for c in tried)


def test_shared_operand_buffers_are_timed_only_where_there_are_tile_operands():
    """Autotuning times the configurations whose warpgroups share tile-operand buffers where
    the launch has a tile operand the kernel stages (one TMA can address); without one they
    would be their twins timed again."""
    from coda.codegen.kernel import _has_tiles

    a, b = torch.randn(64, 32), torch.randn(32, 64)
    tile = torch.randn(64, 64)
    unaddressable = torch.randn(64, 65)[:, 1:]   # rows 260 bytes apart: not a multiple of 16

    def shared(source: str, **tiles) -> list:
        prog = coda.compile(source)
        launch = prog.bind(a, b, **tiles)
        return [c for c in tuning.candidates("hopper", True, _has_tiles(launch)) if c.share_tiles]

    every = [c for c in tuning.candidates("hopper") if c.share_tiles]
    assert every
    assert shared("output = input;") == []
    assert shared("output = pack(input, input * 2);") == []
    assert shared("EPILOGUE(r: tile) { output = input + r; }", r=tile) == every
    assert shared("EPILOGUE(r: tile) { output = input + r; }", r=unaddressable) == []
    assert shared("EPILOGUE(r: tile, s: tile) { output = input * r + s; }", r=tile, s=tile) == every
