"""benchmarks/side_by_side.py: children warm up together, and no child measures before every
child of its group is warm; failures and timeouts become errors, not a stuck benchmark; the
benchmarks built on it say so where there is no GPU."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import side_by_side  # benchmarks/, put on sys.path by conftest.py
import torch

#: A child that "warms up" for argv[1] seconds, waits for its turn, then reports when its turn
#: began and ended (wall-clock seconds, comparable across processes).
CHILD = """
import sys, time
started = time.time()
import side_by_side
time.sleep(float(sys.argv[1]))
ready = time.time()
side_by_side.wait_turn()
began = time.time()
time.sleep(0.05)
side_by_side.report(dict(started=started, ready=ready, began=began, ended=time.time(), name=sys.argv[2]))
"""


BENCHMARKS = Path(side_by_side.__file__).parent


def child(warm_up: float, name: str, timeout: float = 60, code: str = CHILD) -> side_by_side.Child:
    path = os.pathsep.join((str(BENCHMARKS), os.environ.get("PYTHONPATH", "")))
    return side_by_side.Child([sys.executable, "-c", code, str(warm_up), name], timeout,
                              env={"PYTHONPATH": path})


def test_turns_begin_after_the_whole_group_is_warm_and_run_one_at_a_time():
    # the first child is warm at once, the last one late: its warm-up must not overlap a turn
    group = [child(warm_up, name) for warm_up, name in ((0.0, "a"), (0.3, "b"), (1.5, "c"))]
    side_by_side.wait_ready(group)
    turns = [c.take_turn() for c in group]
    assert all(t.error is None for t in turns), [t.log for t in turns]
    results = [t.result for t in turns]
    assert [r["name"] for r in results] == ["a", "b", "c"]
    last_ready = max(r["ready"] for r in results)
    assert all(r["began"] >= last_ready for r in results)
    for earlier, later in itertools.pairwise(results):
        assert later["began"] >= earlier["ended"]


#: A child that times three rounds, waiting for its turn before each, and reports each round's
#: start and end (argv[1]: seconds to sleep in a round; "hang" in argv[2]: the second round never ends).
ROUNDS_CHILD = """
import sys, time
import side_by_side
rounds = []
for i in range(3):
    side_by_side.wait_turn()
    began = time.time()
    time.sleep(float(sys.argv[1]) if i != 1 or "hang" not in sys.argv[2] else 60)
    rounds.append((began, time.time()))
side_by_side.report(dict(name=sys.argv[2], rounds=rounds))
"""


def test_rounds_of_a_group_interleave_one_at_a_time():
    group = [child(0.05, name, code=ROUNDS_CHILD) for name in "ab"]
    side_by_side.wait_ready(group)
    for _ in range(2):
        for c in group:
            c.take_round()
    turns = [c.take_turn() for c in group]
    assert all(t.error is None for t in turns), [t.log for t in turns]
    a, b = (t.result["rounds"] for t in turns)
    order = [a[0], b[0], a[1], b[1], a[2], b[2]]
    for earlier, later in itertools.pairwise(order):
        assert later[0] >= earlier[1]


def test_a_round_past_the_timeout_kills_the_child_and_its_turn_says_so():
    start = time.perf_counter()
    hung = child(0.05, "hang", timeout=3, code=ROUNDS_CHILD)
    side_by_side.wait_ready([hung])
    hung.take_round()
    hung.take_round()   # the hanging one
    hung.take_round()   # nothing left to run: returns at once
    turn = hung.take_turn()
    assert turn.error == "timed out after 3 s" and turn.result is None
    assert time.perf_counter() - start < 20


def test_a_round_of_a_child_that_has_ended_returns_and_its_turn_reports():
    done = child(0, "x", code="import side_by_side; side_by_side.report([3])")
    side_by_side.wait_ready([done])
    start = time.perf_counter()
    done.take_round()
    done.take_round()
    assert time.perf_counter() - start < 5
    turn = done.take_turn()
    assert turn.error is None and turn.result == [3]


def child_command(warm_up: float, name: str) -> list[str]:
    return [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(BENCHMARKS)!r})\n{CHILD}",
            str(warm_up), name]


def test_turns_start_groups_together_and_one_at_a_time_when_autotuning(monkeypatch):
    commands = [child_command(0.2, name) for name in "abc"]
    monkeypatch.setenv("CODA_AUTOTUNE", "0")
    grouped = [t.result for t in side_by_side.turns(commands, 2, timeout=60)]
    assert [r["name"] for r in grouped] == ["a", "b", "c"]
    assert grouped[1]["started"] < grouped[0]["began"]    # a and b warmed up together
    assert grouped[2]["started"] >= grouped[1]["ended"]   # c in the next group
    monkeypatch.setenv("CODA_AUTOTUNE", "1")
    alone = [t.result for t in side_by_side.turns(commands, 3, timeout=60)]
    assert all(later["started"] >= earlier["ended"] for earlier, later in itertools.pairwise(alone))


def test_a_child_that_fails_becomes_an_error_with_its_output():
    turn = child(0, "x", code="import sys; print('about to fail'); sys.exit(3)").take_turn()
    assert turn.result is None
    assert turn.error == "the child exited with code 3"
    assert "about to fail" in turn.log


def test_a_child_that_never_gets_ready_is_killed_at_its_timeout():
    start = time.perf_counter()
    slow = child(30, "slow", timeout=1)
    side_by_side.wait_ready([slow])
    turn = slow.take_turn()
    assert turn.error == "timed out after 1 s"
    assert time.perf_counter() - start < 10
    assert slow.proc.poll() is not None


def test_waiting_for_a_group_member_that_never_warms_up_leaves_the_others_their_time():
    # (wait_turn imports torch: a few seconds of each child's warm-up)
    fast, slow = child(0.0, "fast", timeout=8), child(60, "slow", timeout=8)
    side_by_side.wait_ready([fast, slow])   # until slow's warm-up runs out: fast's 8 s are gone
    turn = fast.take_turn()
    assert turn.error is None and turn.result["name"] == "fast", turn.log
    assert turn.seconds > 8
    assert slow.take_turn().error == "timed out after 8 s"


def test_a_child_that_does_not_wait_runs_to_its_end():
    code = "import side_by_side; side_by_side.report([1, 2])"
    turn = child(0, "x", code=code).take_turn()
    assert turn.error is None and turn.result == [1, 2]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message a machine without a GPU gets")
@pytest.mark.parametrize("command", [
    "micro.py", "cross_entropy_memory.py", "launch_counts.py",
    # these raised "Torch not compiled with CUDA enabled" (an audit's find)
    "gemm.py", "ablation.py", "power_probe.py", "profile_launch.py", "launch_overhead.py",
    "kernel_configs.py gpt2", "profile_kernel.py run bias_gelu Config(64,64,32)"])
def test_the_gpu_benchmarks_say_they_need_a_gpu(command):
    script, *args = command.split()
    done = subprocess.run([sys.executable, str(BENCHMARKS / script), *args],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().startswith(f"benchmarks/{script}") and done.stderr.strip().endswith(
        "needs a CUDA GPU"), done.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks what a machine without a GPU gets")
def test_run_all_without_a_gpu_leaves_the_results_alone():
    """Each stage failed with that message, overwrote the committed logs with it, and the script
    exited 0 (an audit's find): it now stops first, with status 2."""
    results = BENCHMARKS / "results"
    before = {p: p.stat().st_mtime_ns for p in results.iterdir() if p.is_file()}
    done = subprocess.run(["bash", str(BENCHMARKS / "run_all.sh")], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2 and "needs a CUDA GPU" in done.stderr, done.stderr
    assert {p: p.stat().st_mtime_ns for p in results.iterdir() if p.is_file()} == before
