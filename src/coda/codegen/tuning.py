"""Launch configurations: the candidates, a heuristic default, autotuning and its on-disk cache.

The chosen configuration of each (program, mainloop, dtype, shape bucket, GPU) is stored in
`$CODA_CACHE_DIR/tuning.json` (default `~/.cache/coda`), so a second process does not tune again.
`CODA_AUTOTUNE=0` skips tuning and uses the heuristic. The store is guarded by a lock, written
atomically, and a corrupt file is treated as empty.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path


@dataclass(frozen=True)
class Config:
    block_m: int
    block_n: int
    block_k: int
    num_warps: int = 4
    num_stages: int = 3
    group_m: int = 8
    split_epilogue: int = 1        # hopper: run the epilogue on 1, 2 or 4 column slices
    flatten: bool = True           # hopper: flatten the tile loop with the K loop
    stream_k: bool = False         # hopper: cut all tiles' K blocks into one equal run per SM
                                   # (few tiles, long K); one A tensor, no `a_col_sums`
    pingpong: bool = False         # hopper: the warp-specialized ping-pong kernel (Gluon), in
                                   # which num_stages is the depth of its shared-memory ring
    stage_tiles: bool = True       # ping-pong: tile operands come by TMA into shared memory
                                   # during the K loop; False: the epilogue loads them itself,
                                   # under the other warpgroup's MMAs (operands too big to stage)
    stage_outputs: bool = True     # ping-pong: output tiles leave through shared memory and TMA
                                   # stores; False: from registers, in 16-byte pieces put
                                   # together by warp shuffles (an option, not a candidate:
                                   # slower with computing epilogues, docs/performance.md,
                                   # thirtieth session)
    share_tiles: bool = False      # ping-pong: the two warpgroups' tile operands in one set of
                                   # buffers, fetched by a warp of their own (half the shared
                                   # memory: a deeper ring beside several operands)
    pair_rows: bool = False        # ping-pong: the two warpgroups take the two row halves of one
                                   # 2 * block_m-row tile at the same time, so each B tile is
                                   # fetched once for both (a quarter fewer A/B bytes a FLOP);
                                   # their epilogues then run together, not under MMAs
                                   # (an option, not a candidate: slower with every fused
                                   # epilogue, docs/performance.md, sixty-second session)

    def meta(self, variant: str) -> dict:
        """The kernel's compile-time arguments for this configuration."""
        meta = dict(BLOCK_M=self.block_m, BLOCK_N=self.block_n, BLOCK_K=self.block_k,
                    GROUP_M=self.group_m, num_warps=self.num_warps, num_stages=self.num_stages)
        if variant == "map":
            return dict(BLOCK_M=self.block_m, BLOCK_N=self.block_n, num_warps=self.num_warps)
        if variant == "hopper":
            meta.update(EPILOGUE_SPLIT=self.split_epilogue, FLATTEN=self.flatten,
                        EPILOGUE_N=self.epilogue_block_n, STREAM_K=self.stream_k)
        if variant == "pingpong":
            # two MMA warpgroups of 4 warps and a 1-warp loader share 168 registers a thread
            # on average: the loader gives all but 40 of its share to the MMA warpgroups
            del meta["num_stages"]
            meta.update(STAGES=self.num_stages, EPILOGUE_SPLIT=self.split_epilogue,
                        LOAD_REGS=40, MMA_REGS=232, maxnreg=168, PAIRED=self.pair_rows)
        return meta

    def mainloop(self, variant: str) -> str:
        """The mainloop template this configuration runs for a launch of `variant`."""
        return "pingpong" if variant == "hopper" and self.pingpong else variant

    @property
    def epilogue_block_n(self) -> int:
        return self.block_n // self.split_epilogue

    @classmethod
    def from_entry(cls, entry: object) -> Config | None:
        """The configuration a tuning file's entry stores, or None where it stores none that could
        run (a field missing, unknown or of another type, a size that is no positive power of two:
        an edited or damaged file), so that the launch tunes again."""
        kinds = {field.name: field.type for field in fields(cls)}
        if not isinstance(entry, dict) or not set(entry) <= set(kinds):
            return None
        for name, value in entry.items():
            if kinds[name] == "bool":
                valid = isinstance(value, bool)
            else:
                valid = isinstance(value, int) and not isinstance(value, bool) and value > 0 and (
                    name in ("num_stages", "group_m") or value & (value - 1) == 0)
            if not valid:
                return None
        try:
            return cls(**entry)
        except TypeError:   # a field without a default missing
            return None


CANDIDATES = {
    "hopper": [
        Config(128, 256, 64, 8, 3, split_epilogue=2),
        Config(128, 256, 64, 8, 4, split_epilogue=2),
        Config(128, 256, 64, 8, 3),
        Config(128, 256, 64, 8, 3, split_epilogue=4),
        Config(128, 256, 64, 8, 4, group_m=16, split_epilogue=2),
        Config(128, 128, 64, 8, 4),
        Config(128, 128, 64, 8, 4, split_epilogue=2),
        Config(128, 256, 64, 8, 3, split_epilogue=2, flatten=False),
        Config(64, 128, 64, 4, 4),
        Config(128, 128, 64, 4, 4, split_epilogue=2, pingpong=True),
        Config(128, 128, 64, 4, 3, split_epilogue=2, pingpong=True),
        Config(128, 128, 64, 4, 4, split_epilogue=4, pingpong=True),
        Config(128, 128, 64, 4, 5, split_epilogue=4, pingpong=True),
        Config(128, 128, 64, 4, 4, split_epilogue=2, pingpong=True, share_tiles=True),
        Config(128, 128, 64, 4, 5, split_epilogue=4, pingpong=True, share_tiles=True),
    ],
    "portable": [
        Config(128, 128, 32, 4, 4),
        Config(128, 256, 64, 8, 3),
        Config(128, 128, 64, 8, 3),
        Config(64, 128, 32, 4, 4),
        Config(128, 64, 32, 4, 4),
        Config(64, 64, 32, 4, 4),
    ],
}

#: Map (no GEMM) tiles, by what the map writes: memory-bound, but the tile's shape sets how many
#: column partials there are and how wide each program's loads are. Timed on the H200 for the
#: maps of GPT-2, BERT and LLaMA training (benchmarks/results/session10/map_tiles.json, finish
#: included, from CUDA graphs): a map that writes only sums (a bias gradient, LayerNorm's
#: gradient sums) runs 1.7-2.2x faster in 128x64 tiles than in 32x128 ones; one that writes a
#: tile and column sums (dropout or an activation's derivative, then the bias gradient) 1.05-1.35x
#: faster in 64x64 tiles; one that writes a tile without column sums (a norm, its dx) is fastest,
#: within 5%, in 32x128 tiles.
#: A tile-writing map across a wide ragged row (N not a multiple of the tile's 128 columns;
#: measured: the bias-less cross-entropy gradient map at 50257 and 30522) is 15% faster in 16x512 tiles
#: (8x1024: 1% faster still, but dropout draws its numbers in blocks of 16 rows); across an even
#: one (32000, 128256) 32x128 stays 2-9% ahead (benchmarks/results/session25: third/
#: order_probe.json, second/ce_probe2.json, first.tgz's ce_probe.json; why the raggedness
#: matters was not found: a 512-byte row stride did not change it).
MAP_CONFIGS = {"sums": Config(128, 64, 0, num_warps=4), "tile+col": Config(64, 64, 0, num_warps=4),
               "tile": Config(32, 128, 0, num_warps=4), "wide ragged tile": Config(16, 512, 0, num_warps=4)}
#: ...from this many columns on (a threshold between the widths measured: up to 3072, where
#: 32x128 was timed fastest in the tenth session, and 30522).
WIDE_MAP_N = 8192
#: Under the Triton interpreter every program is numpy work: small tiles keep it quick.
INTERPRETER_CONFIG = Config(32, 32, 32, group_m=4)


def map_config(writes_tile: bool, col_reductions: bool, n: int) -> Config:
    """The tile of a map launch (MAP_CONFIGS): by whether it stores a tile, column reductions,
    and for a tile alone its row's width N."""
    if not writes_tile:
        return MAP_CONFIGS["sums"]
    if col_reductions:
        return MAP_CONFIGS["tile+col"]
    tile = MAP_CONFIGS["tile"]
    if n >= WIDE_MAP_N and n % tile.block_n:
        return MAP_CONFIGS["wide ragged tile"]
    return tile


#: The SM count the Hopper heuristic plans waves for (H100 SXM / H200).
SMS = 132


def _wave_fill(tiles: int) -> float:
    """How full the persistent kernel's waves are: tiles over the SM slots of its waves."""
    return tiles / (math.ceil(tiles / SMS) * SMS)


def heuristic(variant: str, m: int, n: int, k: int, pingpong: bool = True, packs: bool = False,
              limited: bool = False, pieces_along_k: bool = False, sums_a: bool = False) -> Config:
    """A sound default without timing. On Hopper: the ping-pong kernel when K is short, where
    its epilogue overlapping the other tile's MMAs pays most, in 2 epilogue slices (as fast as 4
    or faster in every run at GPT-2's fc1 shape; `pingpong=False` gives the Triton kernel's
    configuration there instead: benchmarks/gemm.py times both); else 128x256 tiles
    when there are enough of them to fill the 132 SMs of an H100/H200 (else 128x128; 64 rows,
    one warpgroup, when M is that small: a cross-entropy row block), unless 128x128 tiles fill
    the last wave of the persistent kernel so much better that it outweighs their 1.17x slower
    mainloop (LLaMA's q/k/v weight gradient, 3072x2048, K = 16384: 192 tiles of 128x256 fill
    2 waves 73%, 384 of 128x128 3 waves 97%; 340 against 293 us on the H200,
    benchmarks/results/session10/llama_configs.json). A program that `packs` a [M, 2N] output
    (LLaMA's SwiGLU gradient, with two tile operands) takes the ping-pong kernel at any K, its
    warpgroups sharing one set of operand buffers so that a 4-deep ring fits beside them: on an
    H100 220.6 / 714.4 / 1052.7 / 1262.6 us against 338 (the Triton kernel's 128x256 tiles, the
    first candidate that fit) / 864.0 / 1218.6 / 1322.9 for the Triton kernel's 128x128 tiles,
    the best of that kernel (814 against 836-863 us in 128x256 tiles on the H200,
    benchmarks/results/session14/pack), at 16384x3072x768 / 16384x5632x2048 / 16384x8192x2048
    / 8192x11008x4096 (benchmarks/results/session56). A launch
    under `m_limit` (`limited`) runs fewer rows than m, by design: it takes 128x128 tiles (the
    skipping cross-entropy's dx GEMM at BERT's head, 2458 of 16384 rows, K = 30522: 167 against
    286 us in 128x256 tiles, which leave 72 of the 132 SMs idle; with every row counted, 10624
    rows of GPT-2's head, 1229-1275 against 1065-1175 us; benchmarks/results/session24/final).
    An A in pieces along K (`pieces_along_k`: a Concat, GPT-2's q/k/v gradients) takes the
    ping-pong kernel at any K: the Triton kernel does not flatten its tile loop over pieces, so
    its epilogue holds up the next tile's loads (LayerNorm's dxhat GEMM at GPT-2's
    16384x768x2304: 101.8 against 111.0 us, benchmarks/results/session27). So does a launch
    that sums A's columns (`sums_a`): the Triton kernel reads A's tiles a second time for them
    (BERT's q/k/v dx at 16384x768x2304 with its bias gradient: 355 us in the Triton kernel,
    122.7 in the ping-pong one, against 117.0 for cuBLAS and the column-sum map it replaces;
    benchmarks/results/session35).
    Smaller tiles for small portable launches. Measurements behind each choice:
    docs/performance.md."""
    if variant == "hopper":
        if m <= 64:
            return Config(64, 128, 64, 4, 4)
        if packs and pingpong:
            return Config(128, 128, 64, 4, 4, split_epilogue=2, pingpong=True, share_tiles=True)
        if (k <= 1024 or pieces_along_k or sums_a) and pingpong:
            return Config(128, 128, 64, 4, 4, split_epilogue=2, pingpong=True)
        if limited:
            return Config(128, 128, 64, 8, 4)
        wide = math.ceil(m / 128) * math.ceil(n / 256)
        if (not packs and (m // 128) * (n // 256) >= SMS
                and 1.17 * _wave_fill(wide) >= _wave_fill(2 * wide)):
            return Config(128, 256, 64, 8, 3, split_epilogue=2)
        return Config(128, 128, 64, 8, 4)
    return Config(128, 128, 32, 4, 4) if m * n >= 2048 * 2048 else Config(64, 128, 32, 4, 4)


def cache_dir() -> Path:
    return Path(os.environ.get("CODA_CACHE_DIR") or Path.home() / ".cache" / "coda")


class TuningStore:
    """The on-disk map from a tuning key to the configuration that won, shared by the processes
    that use one cache directory (DDP's ranks, say): a key this process has not seen is looked
    for in the file again, and a new entry is merged into the file as it is then, under a file
    lock, so no process drops another's. A corrupt file reads as empty."""

    def __init__(self, path: Path | None = None):
        self._path = path
        self._lock = threading.Lock()
        self._entries: dict[str, dict] = {}
        self._read_from: Path | None = None

    @property
    def path(self) -> Path:
        """The file: CODA_CACHE_DIR's as it is now (it may be set after `import coda`)."""
        return self._path or cache_dir() / "tuning.json"

    @staticmethod
    def _read(path: Path) -> dict[str, dict]:
        try:
            entries = json.loads(path.read_text())
        except (OSError, ValueError):
            return {}
        return entries if isinstance(entries, dict) else {}

    def get(self, key: str) -> Config | None:
        with self._lock:
            path = self.path
            if path != self._read_from or key not in self._entries:
                self._entries, self._read_from = self._read(path), path
            entry = self._entries.get(key)
        return Config.from_entry(entry)

    def put(self, key: str, config: Config) -> None:
        with self._lock:
            path = self.path
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                with open(path.with_suffix(".lock"), "a") as lock:
                    fcntl.flock(lock, fcntl.LOCK_EX)   # released when closed
                    entries = self._read(path) | {key: asdict(config)}
                    tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
                    tmp.write_text(json.dumps(entries, indent=1, sort_keys=True))
                    os.replace(tmp, path)
            except OSError:   # a read-only cache only costs a re-tune in the next process
                known = self._entries if path == self._read_from else self._read(path)
                entries = known | {key: asdict(config)}
            self._entries, self._read_from = entries, path


STORE = TuningStore()


def candidates(variant: str, pingpong: bool = True, share_tiles: bool = True) -> list[Config]:
    """The configurations autotuning times for a `variant` launch; `pingpong=False` leaves out
    the ping-pong kernel's (for a program it cannot run: one that reads its prior output), and
    `share_tiles=False` those whose warpgroups share their tile operands' buffers (for a launch
    without tile operands, where they are their twins without sharing)."""
    return [c for c in CANDIDATES.get(variant, ()) if (pingpong or not c.pingpong)
            and (share_tiles or not c.share_tiles)]


def autotune(key: str, configs: list[Config], run: Callable[[Config], None], describe: str) -> Config:
    """Time every candidate with `run(config)` (median of CUDA-event timings), keep the fastest.

    Candidates that fail to compile (e.g. too much shared memory) are skipped. Progress goes to
    stderr once tuning has taken more than a second.
    """
    import triton.testing

    cached = STORE.get(key)
    if cached is not None:
        return cached
    start, best, best_ms = time.perf_counter(), None, float("inf")
    for index, config in enumerate(configs):
        try:
            ms = triton.testing.do_bench(lambda c=config: run(c), warmup=5, rep=20,
                                         return_mode="median")
        except Exception as err:
            ms, note = float("inf"), f"skipped ({type(err).__name__})"
        else:
            note = f"{ms * 1e3:.1f} us"
        if ms < best_ms:
            best, best_ms = config, ms
        elapsed = time.perf_counter() - start
        if elapsed > 1.0:
            print(f"coda: tuning {describe}: config {index + 1}/{len(configs)} "
                  f"{config.block_m}x{config.block_n}x{config.block_k} w{config.num_warps} "
                  f"s{config.num_stages}: {note} ({elapsed:.1f} s so far)", file=sys.stderr)
    if best is None:
        raise RuntimeError(f"no kernel configuration could be built for {describe}")
    STORE.put(key, best)
    return best
