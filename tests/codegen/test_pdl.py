"""Programmatic dependent launch: every generated kernel, and its reductions' finishing kernel,
waits for the kernel before it before touching memory, and asks for it only on sm_90+ GPUs."""

from __future__ import annotations

import ast

import pytest
import torch

import coda
from coda.codegen import kernel as kernel_module

SOURCE = "EPILOGUE bias_rowsum(bias: col) { output = input + bias; s = row_sum(output); }"


def first_statements(source: str, name: str) -> list[str]:
    """The first two statements of function `name` in `source`, as text."""
    fn = next(node for node in ast.parse(source).body
              if isinstance(node, ast.FunctionDef) and node.name == name)
    return [ast.unparse(statement) for statement in fn.body[:2]]


@pytest.mark.parametrize("variant", ["portable", "hopper", "pingpong", "map"])
def test_kernels_wait_for_their_predecessor_first(variant):
    prog = coda.compile(SOURCE)
    b = None if variant == "map" else torch.empty(48, 32).T
    launch = prog.bind(torch.empty(64, 32 if b is not None else 48), b, bias=torch.empty(48))
    sig = kernel_module._signature(launch, variant)
    built = prog.triton._build(sig, variant, pdl=True)
    name = f"coda_{'map' if variant == 'map' else 'gemm'}_bias_rowsum"
    for function in (name, "finish"):
        wait, trigger = first_statements(built.source, function)
        assert "griddepcontrol.wait" in wait and "griddepcontrol.launch_dependents" in trigger, function
    assert built.pdl
    assert "griddepcontrol" not in prog.triton._build(sig, variant).source


def test_cpu_launches_do_not_ask_for_it():
    prog = coda.compile(SOURCE)
    launch = prog.bind(torch.empty(64, 32), torch.empty(32, 48), bias=torch.empty(48))
    assert not kernel_module._pdl(launch)
