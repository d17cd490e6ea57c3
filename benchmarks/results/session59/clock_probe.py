"""Is dropout's cost in issue 8's case (b) the epilogue's instructions or the GPU's power cap?

    CODA_AUTOTUNE=0 python benchmarks/results/session59/clock_probe.py --rng philox10 --json out.json

Each kernel (plain, bias+GELU, bias+GELU+dropout+residual; the ping-pong kernel and the Triton
persistent one) runs back to back for `--seconds` while the SM clock and the board power are
sampled (NVML, else `nvidia-smi -lms`): its time a launch, its mean clock and power. `--rng`
builds the dropout kernels with a different hash (the probe's stand-ins; CODA's RNG is
`philox10`): `philox<R>` with R rounds (0 leaves them out); `philox10hilo`, CODA's stream with
two 32-bit multiplies a round instead of one wide one; `threefry<R>`, Threefry-2x32 with R rounds
(adds, rotates and xors, no multiplies: 13 rounds are more instructions than Philox's ten, less
energy each; 20 is the usual count, JAX's). If (b) costs what its instructions cost, threefry13
costs at least philox10's time; if it costs its energy at the cap, the clock drops with philox10
and less with threefry13. Run each `--rng` in a process of its own with its own TRITON_CACHE_DIR
(the generated source is the same). `--profile [CASES]` only launches cases for Nsight Compute
(call7.sh, next_dram.sh). Findings: docs/performance.md, "Dropout's hashing at the power cap".
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import torch
import triton
import triton.language as tl

ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "benchmarks")]
import gemm  # noqa: E402
import profile_kernel  # noqa: E402

import coda  # noqa: E402
from coda.codegen import tl_math  # noqa: E402

SHAPES = [(16384, 3072, 768), (16384, 8192, 2048)]
CASES = ["plain", "bias_gelu", "bias_gelu_dropout_residual"]
KERNELS = ("coda_pingpong/128x128x64s4e2", "coda_hopper")
ROTATIONS = (13, 15, 26, 6, 17, 29, 16, 24)   # Threefry-2x32's rotation constants


@triton.jit
def _rotl(x, r: tl.constexpr):
    return (x << r) | (x >> (32 - r))


@triton.jit
def threefry(seed, c0, c1):
    """Threefry-2x32 with THREEFRY_ROUNDS rounds, key (seed, 0): the probe's multiply-free stand-in."""
    x0 = c0.to(tl.uint32)
    x1 = c1.to(tl.uint32)
    k0 = seed.to(tl.uint32)
    k2 = k0 ^ 0x1BD11BDA
    x0 = x0 + k0
    for i in tl.static_range(THREEFRY_ROUNDS):
        x0 = x0 + x1
        x1 = _rotl(x1, ROTATION_LIST[i % 8]) ^ x0
        if i % 4 == 3:   # key injection s = (i + 1) // 4 with keys (k0, 0, k2)
            if (i + 1) // 4 % 3 == 0:
                x0 = x0 + k0
                x1 = x1 + (i + 1) // 4
            elif (i + 1) // 4 % 3 == 1:
                x1 = x1 + k2 + (i + 1) // 4
            else:
                x0 = x0 + k2
                x1 = x1 + k0 + (i + 1) // 4
    return x0, x1


@triton.jit
def philox_hilo(seed, c0, c1):
    """CODA's Philox-2x32-10, bit for bit, its product's halves from two 32-bit multiplies
    (`mul.hi` + `mul.lo`: IMAD.HI + IMAD) instead of one wide one (IMAD.WIDE)."""
    c0 = c0.to(tl.uint32)
    c1 = c1.to(tl.uint32)
    key = seed.to(tl.uint32)
    for _ in tl.static_range(tl_math.ROUNDS):
        hi = tl.umulhi(c0, tl_math.MULTIPLIER)
        lo = c0 * tl_math.MULTIPLIER
        c0 = hi ^ c1 ^ key
        c1 = lo
        key = key + tl_math.WEYL
    return c0, c1


ROTATION_LIST = tl.constexpr(ROTATIONS)
THREEFRY_ROUNDS = tl.constexpr(13)


class ClockSampler:
    """The SM clock (MHz) and board power (W) every 20 ms, with host timestamps."""

    def __init__(self):
        self.samples: list[tuple[float, float, float]] = []
        self.proc: subprocess.Popen | None = None   # the nvidia-smi fallback's
        try:
            import pynvml
            pynvml.nvmlInit()
            handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
            self.read = lambda: (pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
                                 pynvml.nvmlDeviceGetPowerUsage(handle) / 1000)
            self.source = "nvml"
        except Exception:
            self.read, self.source = self._nvidia_smi(), "nvidia-smi"
        self.stop = False
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _nvidia_smi(self):
        proc = subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw",
                                 "--format=csv,noheader,nounits", "-lms", "20"],
                                stdout=subprocess.PIPE, text=True, bufsize=1)
        latest = [0.0, 0.0]

        def reader():
            for line in proc.stdout:
                try:
                    latest[:] = [float(v) for v in line.split(",")[:2]]
                except ValueError:
                    pass
        threading.Thread(target=reader, daemon=True).start()
        self.proc = proc
        return lambda: tuple(latest)

    def _loop(self):
        while not self.stop:
            clock, power = self.read()
            self.samples.append((time.time(), clock, power))
            time.sleep(0.02)

    def close(self) -> None:
        self.stop = True
        if self.proc is not None:   # nvidia-smi -lms runs until stopped
            self.proc.terminate()

    def mean(self, start: float, end: float) -> tuple[float, float]:
        window = [(c, p) for t, c, p in self.samples if start <= t <= end and c > 0]
        if not window:
            return float("nan"), float("nan")
        return (sum(c for c, _ in window) / len(window), sum(p for _, p in window) / len(window))


def sustained(run, seconds: float, sampler: ClockSampler) -> dict:
    """`run` back to back for `seconds` (after as long a warm-up at the same load): µs a launch,
    mean SM clock and power over the timed part."""
    for _ in range(2):   # a warm-up stretch at the same load, then the timed one
        start_event, end_event = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        began, count = time.time(), 0
        start_event.record()
        while time.time() - began < seconds:
            for _ in range(10):
                run()
            count += 10
        end_event.record()
        end_event.synchronize()
        ended = time.time()
    clock, power = sampler.mean(began + 0.2, ended)
    return dict(us=round(start_event.elapsed_time(end_event) * 1e3 / count, 2), launches=count,
                sm_mhz=round(clock, 1), watts=round(power, 1))


def use_rng(name: str) -> None:
    """Build the dropout kernels with hash `name` (philox<R>, philox10hilo, threefry<R>): call
    before any kernel is built."""
    global THREEFRY_ROUNDS
    rounds = tl.constexpr(int(name.removeprefix("philox").removeprefix("threefry").removesuffix("hilo")))
    if name.endswith("hilo"):
        tl_math.ROUNDS, tl_math.philox = rounds, philox_hilo
    elif name.startswith("philox"):
        tl_math.ROUNDS = rounds
    else:
        THREEFRY_ROUNDS, tl_math.philox = rounds, threefry


def profile_launches(cases: list[str], shape: tuple[int, int, int]) -> None:
    """Each case at `shape` in the ping-pong configuration, three launches each."""
    for case in cases:
        profile_kernel.run(case, "Config(128, 128, 64, 4, 4, split_epilogue=2, pingpong=True)", shape, 3)
        print(case, "launched", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rng", default="philox10", help="philox<rounds> or threefry<rounds>")
    parser.add_argument("--seconds", type=float, default=1.5)
    parser.add_argument("--json")
    parser.add_argument("--profile", nargs="?", const="plain,bias_gelu_dropout_residual",
                        help="only launch these cases (default plain and (b)) in the ping-pong "
                             "kernel, three times each, for Nsight Compute (no sampling)")
    parser.add_argument("--shape", default="16384x8192x2048", help="--profile's M x N x K")
    parser.add_argument("--cases", default=",".join(CASES), help="the sustained runs' cases")
    parser.add_argument("--shapes", default=",".join("x".join(map(str, s)) for s in SHAPES),
                        help="the sustained runs' M x N x K, comma-separated")
    args = parser.parse_args()
    use_rng(args.rng)
    if args.profile:
        return profile_launches(args.profile.split(","), tuple(map(int, args.shape.split("x"))))
    sampler = ClockSampler()
    rows = []
    for m, n, k in (tuple(map(int, shape.split("x"))) for shape in args.shapes.split(",")):
        a, w, ops = gemm.inputs(m, n, k)
        for case in args.cases.split(","):
            prog = coda.compile(gemm.CASES[case]["coda"])
            runs = gemm.mainloop_runs(prog, a, w.T, gemm.used_operands(prog, ops))
            for label in KERNELS:
                row = dict(shape=[m, n, k], case=case, kernel=label, rng=args.rng,
                           **sustained(runs[label], args.seconds, sampler))
                print(json.dumps(row), flush=True)
                rows.append(row)
    sampler.close()
    if args.json:
        meta = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, sampler=sampler.source,
                    command=" ".join(sys.argv))
        Path(args.json).write_text(json.dumps(dict(meta, rows=rows), indent=1))


if __name__ == "__main__":
    main()
