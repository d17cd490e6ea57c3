"""layer_norm_linear's backward with a Conv1D weight (GPT-2's ln_1 + c_attn): the bias gradient
from the weight gradient's GEMM, dy.T @ [xn | 1]'s last column ("ones column", the forty-first
session's form), against the sums of dy's columns from dln's K loop ("K-loop sums", before), in
one process: the fortieth session's ln_linear_probe.py with these two forms (numerics against
float64, ln_1 + c_attn fwd+bwd from CUDA graphs with its kernels, GPT-2's captured step in
alternating rounds). Run: python benchmarks/results/session41/ones_probe.py"""

import contextlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "session40"))
import ln_linear_probe as probe

from coda.ops import norms

probe.FORMS = {"ones column": contextlib.nullcontext,
               "K-loop sums": lambda: probe.patched(norms, "transposed", lambda w: False)}

if __name__ == "__main__":
    probe.check_numerics()
    probe.op_timing()
    probe.step_timing()
