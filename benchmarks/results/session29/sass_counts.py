"""SASS instruction counts of CODA's ping-pong kernel, compiled for sm_90 on any machine (no GPU):
staged outputs against `Config.stage_outputs=False` (16-byte stores from registers), for the
plain GEMM and GPT-2's fc1 epilogue (bias + GELU + slope) at 16384×3072×768 in 2 slices.

    TRITON_INTERPRET=0 PYTHONPATH=src python benchmarks/results/session29/sass_counts.py

Compiled as the JIT specializes on the GPU (16-byte aligned pointers, sizes and strides
divisible by 16, unit strides constant), so that stores vectorize as they would there; counted
with the nvdisasm shipped with Triton, both MMA warpgroups' copies of the epilogue included.
"""

import collections
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon._runtime import GluonASTSource

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "tests" / "codegen"))
import test_hopper_compiles as offline  # noqa: E402  (Recorder, _type)

import coda  # noqa: E402
from coda.codegen import kernel as kernel_module  # noqa: E402
from coda.codegen.tuning import Config  # noqa: E402

PROGRAMS = {"plain": "output = input;",
            "bias_gelu_slope": "EPILOGUE(bias: col) { h = input + bias; save slope = gelu_grad(h); "
                               "output = gelu(h); }"}
SHOWN = ("STG", "SHFL", "SEL", "PRMT", "STSM", "UTMASTG", "STS.128", "LDSM")


def sass(prog, launch, config: Config) -> tuple[collections.Counter, dict]:
    """The kernel's SASS opcodes and ptxas's registers and spilled bytes a thread."""
    built = prog.triton._build(kernel_module._signature(launch, "pingpong", True, config.stage_outputs),
                               "pingpong")
    recorder = offline.Recorder(built.fn.arg_names)
    finish = built.finish and offline.Recorder(built.finish.arg_names)
    plan = kernel_module.Plan(kernel_module.Kernel(built.variant, built.source, recorder, finish), config,
                              launch)
    plan.run(launch.a, launch.b, launch.values, None, launch.seed, (None, None))
    meta = dict(recorder.meta)
    options = {key: meta.pop(key) for key in ("num_warps", "num_stages", "maxnreg") if key in meta}
    fn = built.fn
    values = dict(zip([p for p in fn.arg_names if p not in meta], recorder.args, strict=True))
    signature = {p: "constexpr" if p in meta else offline._type(values[p]) for p in fn.arg_names}
    attrs = {(i,): [["tt.divisibility", 16]] for i, p in enumerate(fn.arg_names)
             if p in values and (isinstance(values[p], torch.Tensor)
                                 or (type(values[p]) is int and values[p] > 0 and values[p] % 16 == 0))}
    for p, value in values.items():
        if type(value) is int and value == 1:
            meta[p], signature[p] = 1, "constexpr"
    compiled = triton.compile(GluonASTSource(fn, signature, constexprs=meta, attrs=attrs),
                              target=GPUTarget("cuda", 90, 32), options=options)
    nvdisasm = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "nvdisasm"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as cubin:
        cubin.write(compiled.asm["cubin"])
        cubin.flush()
        text = subprocess.run([str(nvdisasm), "-c", cubin.name], capture_output=True, text=True,
                              check=True).stdout
    opcode = r"^\s+/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_.]+)"
    return collections.Counter(re.findall(opcode, text, re.M)), offline.ptxas_report(compiled.asm["ptx"])


def main() -> None:
    kernel_module._num_sms = lambda device: 132
    m, n, k = 16384, 3072, 768
    for name, text in PROGRAMS.items():
        prog = coda.compile(text)
        operands = {"bias": torch.empty(n, dtype=torch.bfloat16)}
        launch = prog.bind(torch.empty(m, k, dtype=torch.bfloat16), torch.empty(n, k, dtype=torch.bfloat16).T,
                           **{p: v for p, v in operands.items() if p in prog.ir.params})
        for staged in (True, False):
            counts, ptxas = sass(prog, launch, Config(128, 128, 64, 4, 4, split_epilogue=2, pingpong=True,
                                               stage_outputs=staged))
            shown = {op: c for op, c in sorted(counts.items()) if op.startswith(SHOWN)}
            print(f"{name:16s} {'staged' if staged else 'registers':9s} {sum(counts.values()):6d} {shown} "
                  f"{ptxas}")


if __name__ == "__main__":
    main()
