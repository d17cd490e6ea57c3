"""Benchmark runs in subprocesses that warm up side by side and are measured one at a time.

On a fresh machine most of a benchmark's first minutes go to compilation (torch.compile, Liger's
and CODA's Triton kernels), which runs on the host's cores, while a timing needs the GPU and the
host to itself. So a parent starts a group of children together: each builds its case, warms it
up (compiles it) and calls `wait_turn`. Once every child of the group is ready (`wait_ready`: no
timing overlaps another child's warm-up), the parent lets them measure one at a time with
`Child.take_turn`, while the others wait idle with their cached GPU memory given back. A child
that never calls `wait_turn` simply runs to its end when its turn comes. A child ends with
`report(result)`, one JSON line on its standard output. `turns` does all of it for a list of
commands, a group at a time, and one child at a time where CODA autotunes (tuning times kernels).
A child may measure in rounds: it calls `wait_turn` again after each round but the last, and the
parent gives it each round with `Child.take_round` (the children of a group in turn, so that their
rounds interleave and a drift of the GPU's clock under its power cap reaches every child alike),
then its last one with `take_turn`.

Each child is its own process, so GPU memory, compile caches and monkey-patching (Liger patches
HF's classes) do not leak between runs, and a child that fails or runs out of time becomes an
error row instead of ending the benchmark.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

#: A child prints its result on one line after this marker, and this line once warmed up.
RESULT = "CODA_BENCH_RESULT "
READY = "CODA_BENCH_READY"
#: Inductor compiles in a pool of one worker per core by default; a dozen children side by side
#: would start a dozen pools. One thread each: the children are the parallelism.
CHILD_ENV = {"TORCHINDUCTOR_COMPILE_THREADS": "1"}


def wait_turn() -> None:
    """Tell the parent that the warm-up is done, give cached GPU memory back (the other children
    warm up meanwhile), and block until the parent says that it is this child's turn. The caller
    should run its case once more, untimed, before timing: without it the first timed call pays
    cudaMalloc for every block (measured in train.py: BERT's eager throughput 22% lower)."""
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    print(READY, flush=True)
    sys.stdin.readline()


def require_gpu(script: str) -> None:
    """Exit with a clear message (status 2) where no CUDA GPU is present: the GPU benchmarks'
    children would each fail with a traceback."""
    import torch

    if not torch.cuda.is_available():
        print(f"{script} needs a CUDA GPU", file=sys.stderr)
        sys.exit(2)


def report(result: Any) -> None:
    """The child's result, for the parent's `take_turn`."""
    print(RESULT + json.dumps(result), flush=True)


@dataclass
class Turn:
    """What a child gave back: its reported result (None if it reported none), why not, how long
    it lived, and the tail of its output (for error rows)."""
    result: Any
    error: str | None
    seconds: float
    log: str


class Child:
    """`command` running in a subprocess that may call `wait_turn` once warmed up. It has `timeout`
    seconds to warm up and, once its turn has come, `timeout` seconds more to report: waiting for
    the rest of its group does not use its time (a group member that never warms up would
    otherwise leave every other one out of time when their turns come)."""

    def __init__(self, command: list[str], timeout: float, env: dict[str, str] | None = None):
        self.timeout = timeout
        self.start = self.phase_start = time.perf_counter()
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True,
                                     env={**os.environ, **(env or {})})
        self.lines: list[str] = []
        self.timed_out = False
        self.ready = threading.Event()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line)
            if line.startswith(READY):
                self.ready.set()
        self.ready.set()   # it exited (or failed) before getting ready: nothing to wait for

    def left(self) -> float:
        """Seconds left of the timeout of the child's warm-up, or of its turn once begun."""
        return max(self.timeout - (time.perf_counter() - self.phase_start), 0)

    def take_round(self) -> None:
        """Let the child measure one round (once warmed up) and wait until it waits again, or has
        ended (its `take_turn` then says how), or ran out of time (it is then killed)."""
        if self.timed_out or not self.ready.wait(self.left()):
            self._kill()
            return
        self.phase_start = time.perf_counter()
        self.ready.clear()   # set again by its next READY line, or when it exits
        if not self.reader.is_alive():   # it has ended: its take_turn says how
            self.ready.set()
            return
        self._go()
        if not self.ready.wait(self.left()):
            self._kill()

    def take_turn(self) -> Turn:
        """Let the child measure (once warmed up) and wait for it to end."""
        result, error = None, None
        try:
            if self.timed_out or not self.ready.wait(self.left()):
                raise subprocess.TimeoutExpired(self.proc.args, self.timeout)
            self.phase_start = time.perf_counter()
            self._go()
            self.proc.wait(self.left())
            self.reader.join()
            found = [line for line in self.lines if line.startswith(RESULT)]
            if found:
                result = json.loads(found[-1].removeprefix(RESULT))
            else:
                error = f"the child exited with code {self.proc.returncode}"
        except subprocess.TimeoutExpired:
            self._kill()
        if self.timed_out:
            error = f"timed out after {self.timeout:g} s"
        return Turn(result, error, time.perf_counter() - self.start, "".join(self.lines)[-3000:])

    def _go(self) -> None:
        try:
            self.proc.stdin.write("go\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass   # it has exited: its output says why

    def _kill(self) -> None:
        """Out of time: gone, its GPU memory with it, before the next child's turn."""
        if self.proc.poll() is None:
            self.timed_out = True
            self.proc.kill()
        self.proc.wait()


def wait_ready(children: Iterable[Child]) -> None:
    """Block until every child has warmed up, ended or run out of time."""
    for child in children:
        child.ready.wait(child.left())


def turns(commands: list[list[str]], together: int, timeout: float) -> Iterator[Turn]:
    """The turns of `commands`' children, in order: `together` at a time are started, warm up
    side by side, and measure one after the other (one at a time where a warm-up autotunes:
    tuning times kernels and must have the GPU to itself)."""
    together = 1 if autotuning() else max(together, 1)
    for first in range(0, len(commands), together):
        env = CHILD_ENV if together > 1 else None   # alone, a child keeps Inductor's pool
        group = [Child(command, timeout, env=env) for command in commands[first:first + together]]
        wait_ready(group)
        for child in group:
            yield child.take_turn()


def autotuning() -> bool:
    """Whether CODA tunes its kernel configurations at their first launch (CODA_AUTOTUNE, on
    unless "0"; run_all.sh turns it off)."""
    return os.environ.get("CODA_AUTOTUNE", "1") != "0"
