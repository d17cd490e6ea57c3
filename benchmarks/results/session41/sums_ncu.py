"""One launch of GPT-2's ln_1 backward GEMM shape (16384 x 768 x 2304, bf16, ping-pong kernel's
default configuration) with or without `a_col_sums`, for Nsight Compute (call4.sh):
    python benchmarks/results/session41/sums_ncu.py 0|1"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "src"))
from coda.codegen.tuning import Config
from coda.ops.common import PLAIN

a = torch.randn(16384, 2304, device="cuda", dtype=torch.bfloat16)
w = torch.randn(2304, 768, device="cuda", dtype=torch.bfloat16) * 2304**-0.5
launch = PLAIN.bind(a, w, a_col_sums=sys.argv[1] == "1")
plan = PLAIN.triton.plan(launch, Config(128, 128, 64, 4, 4, split_epilogue=2, pingpong=True))
for _ in range(4):
    plan.run(a, w, launch.values, None, launch.seed, (None, None))
torch.cuda.synchronize()
