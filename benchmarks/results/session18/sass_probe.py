"""Offline SASS of the ping-pong kernel (sm_90) for the fast-path epilogues: opcode counts.

TRITON_INTERPRET=0 .venv/bin/python benchmarks/results/session18/sass_probe.py [name ...]
"""
import collections
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests" / "codegen"))
import test_hopper_compiles as thc

PROGRAMS = dict(thc.PROGRAMS, plain="EPILOGUE() { output = input; }",
                residual="EPILOGUE(residual: tile) { output = input + residual; }",
                dropout="EPILOGUE(p: scalar) { output = dropout(input, p); }",
                bias_dropout_residual="EPILOGUE(bias: col, residual: tile, p: scalar) "
                                      "{ output = dropout(input + bias, p) + residual; }")


def sass_of(name: str, config=None) -> str:
    import torch
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    import coda
    from coda.codegen import kernel as kernel_module
    from coda.codegen import tuning

    kernel_module._num_sms = lambda device: 132
    m, n, k = 16384, 3072, 768
    prog = coda.compile(PROGRAMS[name])
    tile = torch.empty(m, n, dtype=torch.bfloat16)
    operands = {"bias": torch.empty(n, dtype=torch.bfloat16), "residual": tile, "pre": tile,
                "rstd": torch.empty(m, dtype=torch.float32), "p": 0.1}
    launch = prog.bind(torch.empty(m, k, dtype=torch.bfloat16), torch.empty(n, k, dtype=torch.bfloat16).T,
                       seed=1, **{p: v for p, v in operands.items() if p in prog.ir.params})
    config = config or tuning.heuristic("hopper", m, n, k)
    variant = config.mainloop("hopper")
    built = prog.triton._build(kernel_module._signature(launch, variant, config.stage_tiles), variant)
    recorder = thc.Recorder(built.fn.arg_names)
    finish = built.finish and thc.Recorder(built.finish.arg_names)
    kernel = kernel_module.Kernel(built.variant, built.source, recorder, finish)
    plan = kernel_module.Plan(kernel, config, launch)
    plan.run(launch.a, launch.b, launch.values, None, launch.seed)
    meta = dict(recorder.meta)
    options = {key: meta.pop(key) for key in ("num_warps", "num_stages", "maxnreg") if key in meta}
    fn = built.fn
    values = dict(zip([p for p in fn.arg_names if p not in meta], recorder.args, strict=True))
    # as the launcher specializes: integers equal to 1 become constants, and pointers and
    # integers divisible by 16 say so
    from triton.backends.compiler import BaseBackend
    from triton.runtime.jit import native_specialize_impl
    signature, attrs = {}, {}
    for index, p in enumerate(fn.arg_names):
        if p in meta:
            signature[p] = "constexpr"
            continue
        value = values[p]
        kind, key = native_specialize_impl(BaseBackend, value, False, p != "seed", True)
        if kind == "constexpr":
            signature[p], meta[p] = "constexpr", key
            continue
        signature[p] = kind
        if key:
            attrs[(index,)] = BaseBackend.parse_attr(key)
    compiled = triton.compile(GluonASTSource(fn, signature, constexprs=meta, attrs=attrs),
                              target=GPUTarget("cuda", 90, 32), options=options)
    out = Path(tempfile.mkdtemp())
    (out / "k.cubin").write_bytes(compiled.asm["cubin"])
    (out / "k.ptx").write_text(compiled.asm["ptx"])
    (out / "src.py").write_text(built.source)
    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    sass = subprocess.run([str(tool), "-sass", str(out / "k.cubin")], capture_output=True, text=True).stdout
    (out / "k.sass").write_text(sass)
    print(name, "files in", out, file=sys.stderr)
    return sass


def histogram(sass: str) -> collections.Counter:
    ops = re.findall(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]+)", sass)
    return collections.Counter(op.split(".")[0] for op in ops), collections.Counter(ops)


if __name__ == "__main__":
    for name in sys.argv[1:] or ["bias_gelu_dropout_residual"]:
        base, full = histogram(sass_of(name))
        print(name, sum(base.values()), "instructions")
        print("  ", ", ".join(f"{op} {c}" for op, c in base.most_common(40)))
        memory = ("LD", "ST", "SHF", "PRMT", "F2F", "I2F", "SHFL", "RED", "ATOM")
        print("  ", ", ".join(f"{op} {c}" for op, c in full.most_common(60) if op.startswith(memory)))
