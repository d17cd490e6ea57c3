"""One build's timings for a comparison of two builds run alternately (seventy-first session:
round_bf16 by the GPU's conversion, gelu_grad's reordered term).

    python benchmarks/results/session71/builds.py TREE LABEL

TREE is a checkout whose src/coda and benchmarks/gemm.py are timed: the fused GEMMs of gelu and
its gradient over the plain one (gemm.py's paired ratios) at GPT-2's two MLP shapes, and GPT-2's
LM head + cross-entropy forward and backward (16384 x 768 -> 50257, bf16: the exponential path,
whose epilogue rounds the logits with round_bf16). Prints one JSON line."""

import json
import statistics
import sys
from pathlib import Path

tree, label = Path(sys.argv[1]).resolve(), sys.argv[2]
sys.path.insert(0, str(tree / "benchmarks"))
import gemm  # noqa: E402  (puts TREE/src first on the path)
import torch  # noqa: E402

import coda  # noqa: E402

assert Path(coda.__file__).resolve().is_relative_to(tree), coda.__file__
result = {"build": label, "gpu": torch.cuda.get_device_name()}
for m, n, k in [(16384, 3072, 768), (16384, 768, 3072)]:
    a, w, ops = gemm.inputs(m, n, k)
    runs = {}
    for case in ("plain", "bias_gelu", "dgelu_bias_grad"):
        prog = coda.compile(gemm.CASES[case]["coda"])
        used = gemm.used_operands(prog, ops)
        runs[case] = lambda prog=prog, used=used: prog(a, w.T, seed=1, **used)
        runs[case]()
    for case in ("bias_gelu", "dgelu_bias_grad"):
        ratios = gemm.paired_ratios(runs[case], runs["plain"], 3)
        result[f"{case}@{m}x{n}x{k}"] = round(statistics.median(ratios), 4)
    result[f"plain_us@{m}x{n}x{k}"] = round(gemm.bench(runs["plain"]) * 1e3, 1)

torch.manual_seed(0)
x = torch.randn(16384, 768, device="cuda", dtype=torch.bfloat16, requires_grad=True)
head = (torch.randn(50257, 768, device="cuda", dtype=torch.bfloat16) / 768**0.5).requires_grad_()
target = torch.randint(50257, (16384,), device="cuda")


def step():
    x.grad = head.grad = None
    coda.ops.linear_cross_entropy(x, head, target).backward()


step()
result["ce_fwd_bwd_ms"] = [round(gemm.bench(step), 3) for _ in range(3)]
print(json.dumps(result), flush=True)
