"""The Gluon ping-pong draft (benchmarks/experiments/gluon_pingpong.py) compiles for sm_90 without a GPU.

Triton compiles to PTX (and ptxas, shipped in the wheel, to a cubin) given an explicit GPUTarget, so
this runs on CPU-only machines; it checks that the kernel really uses the Hopper paths it was written
for: wgmma, TMA bulk-tensor loads and stores, mbarriers and warp-specialized register reallocation.
Correctness and speed are checked by the module's main() on an H100/H200.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "experiments" / "gluon_pingpong.py"


def _load():
    pytest.importorskip("triton.experimental.gluon.language.nvidia.hopper",
                        reason="this Triton has no Gluon Hopper module")
    spec = importlib.util.spec_from_file_location("gluon_pingpong", PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def module():
    return _load()


@pytest.fixture(scope="module", params=[True, False], ids=["bias_gelu", "plain"])
def compiled(module, request):
    try:
        return module.compile_for_sm90(epilogue=request.param)
    except (ImportError, RuntimeError, FileNotFoundError) as exc:  # no ptxas / no NVIDIA backend here
        if "ptxas" in str(exc).lower() or "backend" in str(exc).lower():
            pytest.skip(f"Triton cannot compile for sm_90 on this machine: {exc}")
        raise


def test_module_imports(module):
    assert callable(module.main) and callable(module.linear_bias_gelu)
    assert module.BLOCK_N % module.EPI_N == 0


def test_ptx_uses_hopper_async_paths(compiled, module):
    ptx = compiled.asm["ptx"]
    # two consumer warpgroups, each BLOCK_M/64 x BLOCK_K/16 wgmma per K step
    n_wgmma = len(re.findall(r"\bwgmma\.mma_async\b", ptx))
    assert n_wgmma == 2 * (module.BLOCK_M // 64) * (module.BLOCK_K // 16)
    assert "wgmma.wait_group" in ptx
    # TMA loads (A and W) with mbarrier completion, TMA stores of the epilogue sub-tiles
    assert ptx.count("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes") == 2
    n_stores = ptx.count("cp.async.bulk.tensor.2d.global.shared::cta")
    assert n_stores == 2 * (module.BLOCK_N // module.EPI_N)
    assert "cp.async.bulk.wait_group.read" in ptx
    for op in ("mbarrier.init", "mbarrier.try_wait.parity", "mbarrier.arrive", "fence.proxy.async"):
        assert op in ptx, op
    # warp specialization: register reallocation between partitions, 3 warpgroups
    assert "setmaxnreg.dec" in ptx and "setmaxnreg.inc" in ptx
    assert compiled.metadata.num_warps == 12


def test_epilogue_is_fused(module):
    ptx = module.compile_for_sm90(epilogue=True).asm["ptx"]
    assert "tanh.approx.f32" in ptx
    assert "tanh.approx.f32" not in module.compile_for_sm90(epilogue=False).asm["ptx"]


def test_shared_memory_fits_h100(compiled):
    assert compiled.metadata.shared <= 227 * 1024
