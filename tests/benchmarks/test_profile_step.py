"""benchmarks/profile_step.py runs on the CPU (tiny GPT-2, CODA's reference backend) and writes the
step time and a profile in which CODA's launches appear. In a subprocess, as CI would run it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "profile_step.py"


def test_profile_of_a_patched_training_step(tmp_path):
    out = tmp_path / "profile.txt"
    done = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out)], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "TRITON_INTERPRET": "0"})
    assert done.returncode == 0, done.stdout + done.stderr
    text = out.read_text()
    step_ms = float(re.match(r"coda: step ([0-9.]+) ms without the profiler", text).group(1))
    assert step_ms > 0
    assert "Ordered by: internal time" in text and "Ordered by: cumulative time" in text
    # the patched model's steps went through CODA programs
    assert re.search(r"coda/runtime/program\.py:\d+\(_launch\)", text)
