"""Registers, spills and shared memory of benchmarks/gemm.py's fused epilogues in the Triton
Hopper kernel at 8192x4096x4096, 128x256 tiles with 2 and 4 epilogue slices, compiled for sm_90
on a machine without a GPU (the eleventh session's sm90_gemm_cases.log).

    python benchmarks/results/session11/sm90_gemm_cases.py bias_gelu_dropout_residual,residual_rowsumsq
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
for folder in ("benchmarks", "tests/codegen", "src"):
    sys.path.insert(0, str(ROOT / folder))

import torch  # noqa: E402
from gemm import CASES  # noqa: E402
from test_hopper_compiles import compile_sm90  # noqa: E402

import coda  # noqa: E402
from coda.codegen import kernel  # noqa: E402
from coda.codegen.tuning import Config  # noqa: E402


def main() -> None:
    kernel._num_sms = lambda device: 132   # a Plan asks the GPU for its SM count
    m, n, k, bf16 = 8192, 4096, 4096, torch.bfloat16
    operands = {"bias": torch.randn(n, dtype=bf16), "residual": torch.randn(m, n, dtype=bf16),
                "pre": torch.randn(m, n, dtype=bf16), "rstd": torch.rand(m, dtype=bf16), "p": 0.1}
    a, w = torch.randn(m, k, dtype=bf16), torch.randn(n, k, dtype=bf16)
    for case in sys.argv[1].split(","):
        prog = coda.compile(CASES[case]["coda"])
        launch = prog.bind(a, w.T, seed=1, **{x: v for x, v in operands.items() if x in prog.ir.params})
        for slices in (2, 4):
            config = Config(128, 256, 64, 8, 3, split_epilogue=slices)
            built = prog.triton._build(kernel._signature(launch, "hopper"), "hopper")
            found = compile_sm90(kernel, built, config, launch)
            print(dict(case=case, config=str(config), shared=found["shared"],
                       registers=found["registers"], spilled=found["spilled"]), flush=True)


if __name__ == "__main__":
    main()
