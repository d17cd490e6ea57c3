"""Shared test setup: the Triton interpreter on CPU-only machines, and `oracle.py` (the
independent float64 formulas and helpers) importable from every test module."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch

# On a CPU-only machine the Triton backend runs its real kernels through Triton's interpreter.
# Triton fixes the mode when first imported, so it is set here, before any test imports it.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

sys.path.insert(0, str(Path(__file__).parent))
