"""The benchmark scripts, loaded as modules for their tests (benchmarks/ is not a package: its
scripts import their shared modules, side_by_side.py, from beside them, as a script run does)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))


def load_script(name: str):
    spec = importlib.util.spec_from_file_location(f"benchmarks_{name}", BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module   # dataclasses look their module up while it executes
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def bench():
    """benchmarks/train.py as a module."""
    return load_script("train")


@pytest.fixture(scope="module")
def report():
    """benchmarks/report.py as a module."""
    pytest.importorskip("matplotlib")
    return load_script("report")


@pytest.fixture(scope="module")
def gemm():
    """benchmarks/gemm.py as a module."""
    return load_script("gemm")
