"""Case (b)'s ping-pong kernel compiled for sm_90 on any machine, with each of clock_probe.py's
hashes: registers a thread, spilled bytes (ptxas -v), SASS instructions and code size.

    python benchmarks/results/session59/sass_probe.py --rng threefry20   # one process per --rng
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
import triton.language as tl

ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests" / "codegen"), str(Path(__file__).parent)]
import clock_probe  # noqa: E402
import test_hopper_compiles as offline  # noqa: E402

import coda  # noqa: E402
from coda.codegen import kernel as kernel_module  # noqa: E402
from coda.codegen.tuning import Config  # noqa: E402

PROGRAM = ("EPILOGUE(bias: col, residual: tile, p: scalar) "
           "{ output = dropout(gelu(input + bias), p) + residual; }")


def sass_count(cubin: bytes) -> int:
    nvdisasm = Path(tl.__file__).parents[1] / "backends" / "nvidia" / "bin" / "nvdisasm"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        text = subprocess.run([str(nvdisasm), "-c", f.name], capture_output=True, text=True,
                              check=True).stdout
    return len(re.findall(r"^\s+/\*[0-9a-f]{4,}\*/\s+\S", text, flags=re.M))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rng", default="philox10")
    args = parser.parse_args()
    clock_probe.use_rng(args.rng)
    kernel_module._num_sms = lambda device: 132
    m, n, k, bf16 = 16384, 8192, 2048, torch.bfloat16
    prog = coda.compile(PROGRAM)
    launch = prog.bind(torch.empty(m, k, dtype=bf16), torch.empty(n, k, dtype=bf16).T, seed=1,
                       bias=torch.empty(n, dtype=bf16), residual=torch.empty(m, n, dtype=bf16), p=0.1)
    config = Config(128, 128, 64, 4, 4, split_epilogue=2, pingpong=True)
    built = prog.triton._build(kernel_module._signature(launch, "pingpong"), "pingpong")
    captured = {}
    original = offline.ptxas_report

    def report(ptx):
        captured["ptx"] = ptx
        return original(ptx)
    offline.ptxas_report = report
    result = offline.compile_sm90(kernel_module, built, config, launch)
    ptxas = Path(tl.__file__).parents[1] / "backends" / "nvidia" / "bin" / "ptxas"
    with tempfile.TemporaryDirectory() as tmp:
        ptx, cubin = Path(tmp) / "k.ptx", Path(tmp) / "k.cubin"
        ptx.write_text(captured["ptx"])
        subprocess.run([str(ptxas), "-arch=sm_90a", str(ptx), "-o", str(cubin)], check=True)
        code = cubin.read_bytes()
    kept = {key: value for key, value in result.items() if key not in ("wgmma", "tma")}
    print(json.dumps(dict(rng=args.rng, sass_instructions=sass_count(code),
                          code_kb=round(len(code) / 1024, 1), **kept)))


if __name__ == "__main__":
    main()
