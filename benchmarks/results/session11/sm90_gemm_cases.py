"""Registers/spills/shared of benchmarks/gemm.py's fused cases in the Triton Hopper kernel,
128x256 with 2 and 4 epilogue slices, compiled for sm_90 on the CPU."""
import sys, json
from pathlib import Path
sys.path.insert(0, "benchmarks"); sys.path.insert(0, "tests/codegen"); sys.path.insert(0, "src")
import torch
import coda
from gemm import CASES
from test_hopper_compiles import compile_sm90
from coda.codegen import kernel as km
from coda.codegen.tuning import Config
km._num_sms = lambda d: 132
m, n, k = 8192, 4096, 4096
bf = torch.bfloat16
ops = {"bias": torch.randn(n, dtype=bf), "residual": torch.randn(m, n, dtype=bf), "pre": torch.randn(m, n, dtype=bf),
       "rstd": torch.rand(m, dtype=bf), "p": 0.1}
a, w = torch.randn(m, k, dtype=bf), torch.randn(n, k, dtype=bf)
rows = []
for case in sys.argv[1].split(","):
    prog = coda.compile(CASES[case]["coda"])
    used = {x: v for x, v in ops.items() if x in prog.ir.params}
    launch = prog.bind(a, w.T, seed=1, **used)
    for cfg in (Config(128, 256, 64, 8, 3, split_epilogue=2), Config(128, 256, 64, 8, 3, split_epilogue=4)):
        built = prog.triton._build(km._signature(launch, "hopper"), "hopper")
        r = compile_sm90(km, built, cfg, launch)
        rows.append(dict(case=case, config=str(cfg), shared=r["shared"], registers=r["registers"], spilled=r["spilled"]))
        print(rows[-1], flush=True)
Path(".exp/sm90_gemm_cases.json").write_text(json.dumps(rows, indent=1))
