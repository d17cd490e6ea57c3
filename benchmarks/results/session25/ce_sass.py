"""Twenty-fifth session, offline (no GPU): GPT-2's LM-head forward kernel (10624 x 50257 x 768, the
ping-pong configuration the heuristic picks) with and without the target logit's compare-select-
sum, compiled for sm_90: registers, spilled bytes, SASS instructions and the commonest opcodes.

    TRITON_INTERPRET=0 python benchmarks/results/session25/ce_sass.py
"""

import re
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
import triton

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests" / "codegen"))
import test_hopper_compiles as offline  # tests/codegen: compile_sm90's helpers
from ce_probe import with_target, without_target  # beside this script

from coda.codegen import kernel as kernel_module
from coda.codegen import tuning

M, N, K, WIDTH = 10624, 50257, 768, 50272


def sass(ptx: str) -> list[str]:
    """The SASS instruction lines of the PTX's kernel (ptxas and cuobjdump from Triton's wheel)."""
    tools = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
    with tempfile.TemporaryDirectory() as tmp:
        source, cubin = Path(tmp) / "k.ptx", Path(tmp) / "k.cubin"
        source.write_text(ptx)
        subprocess.run([str(tools / "ptxas"), "-arch=sm_90a", str(source), "-o", str(cubin)], check=True)
        dump = subprocess.run([str(tools / "cuobjdump"), "-sass", str(cubin)], capture_output=True,
                              text=True, check=True).stdout
    return [line for line in dump.splitlines() if re.match(r"\s+/\*[0-9a-f]{4,}\*/", line)]


def main() -> None:
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    kernel_module._num_sms = lambda device: 132   # Plan asks the GPU for its SM count
    for label, prog, names in (("with_t", with_target(False, False), ["output", "lse", "t"]),
                               ("without_t", without_target(False, False), ["output", "lse"])):
        ops = {"target": torch.empty(M), "offset": 0.0} if "target" in prog.ir.params else {}
        out = torch.empty(M, WIDTH, dtype=torch.bfloat16)[:, :N]
        launch = prog.bind(torch.empty(M, K, dtype=torch.bfloat16), torch.empty(N, K, dtype=torch.bfloat16).T,
                           out=out, outputs=names, **ops)
        config = tuning.heuristic("hopper", M, N, K, prog.triton.pingpong)
        variant = config.mainloop("hopper")
        built = prog.triton._build(kernel_module._signature(launch, variant, config.stage_tiles), variant)
        recorder = offline.Recorder(built.fn.arg_names)
        finish = built.finish and offline.Recorder(built.finish.arg_names)
        plan = kernel_module.Plan(kernel_module.Kernel(built.variant, built.source, recorder, finish),
                                  config, launch)
        plan.run(launch.a, launch.b, launch.values, out, launch.seed, (None, None))
        meta = dict(recorder.meta)
        options = {key: meta.pop(key) for key in ("num_warps", "num_stages", "maxnreg") if key in meta}
        fn = built.fn
        values = dict(zip([p for p in fn.arg_names if p not in meta], recorder.args, strict=True))
        signature = {p: "constexpr" if p in meta else offline._type(values[p]) for p in fn.arg_names}
        compiled = triton.compile(GluonASTSource(fn, signature, constexprs=meta),
                                  target=GPUTarget("cuda", 90, 32), options=options)
        ptx = compiled.asm["ptx"]
        lines = sass(ptx)
        opcodes: dict[str, int] = {}
        for line in lines:
            found = re.search(r"\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9]+)", line)
            if found:
                opcodes[found.group(1)] = opcodes.get(found.group(1), 0) + 1
        top = sorted(opcodes.items(), key=lambda kv: -kv[1])[:12]
        print(label, config, offline.ptxas_report(ptx), "SASS instructions", len(lines), top)


if __name__ == "__main__":
    main()
