"""The table gradient of a 16384-token batch at GPT-2's size (50257 x 768, bf16): coda.ops.embedding's
sorted pass against PyTorch's backward, ids uniform (the benchmarks' random batches) and
Zipf-like (real text's skew); the parts (zero-fill, sort + searchsorted, the kernel in several
shapes: columns a program, warps, tokens a step, pipeline stages); µs from CUDA graphs of 10 calls."""
import json
import sys

import torch

sys.path.insert(0, "benchmarks")
from kernel_configs import graph_us

from coda.ops import embedding_grad
from coda.ops.embedding import table_grad

rows, h, tokens = 50257, 768, 16384
dy = torch.randn(tokens, h, device="cuda", dtype=torch.bfloat16)
dw = torch.zeros(rows, h, device="cuda", dtype=torch.bfloat16)
#: (columns a program, tokens a step, warps, pipeline stages)
VARIANTS = [(256, 16, 2, 2), (256, 16, 2, 1), (1024, 16, 4, 1), (1024, 16, 4, 2), (512, 32, 4, 1),
            (1024, 32, 8, 2), (128, 16, 1, 1), (256, 64, 4, 2)]
results = []
for law in ("uniform", "zipf1.1"):
    weights = (torch.ones(rows, dtype=torch.float64) if law == "uniform"
               else 1.0 / torch.arange(1, rows + 1, dtype=torch.float64) ** 1.1)
    ids = torch.multinomial(weights, tokens, replacement=True).cuda()
    def torch_grad(ids=ids):
        return torch.ops.aten.embedding_dense_backward(dy, ids, rows, -1, False)

    want = torch_grad().float()
    row = dict(ids=law, top_count=int(torch.bincount(ids).max()), torch_us=graph_us(torch_grad, 10),
               coda_us=graph_us(lambda: table_grad(dy, ids, rows, None), 10),
               zeros_us=graph_us(lambda: torch.zeros(rows, h, device="cuda", dtype=torch.bfloat16), 10),
               sort_us=graph_us(lambda: embedding_grad.sorted_runs(ids), 10))
    runs = embedding_grad.sorted_runs(ids)
    for variant in VARIANTS:
        dw.zero_()
        embedding_grad.kernel(dy, *runs, dw, None, False, *variant)
        ok = torch.allclose(dw.float(), want, rtol=1e-2, atol=1e-2)
        us = graph_us(lambda variant=variant: embedding_grad.kernel(dy, *runs, dw, None, False, *variant), 10)
        row["kernel_h{}_t{}_w{}_s{}".format(*variant)] = round(us, 1) if ok else f"WRONG {us:.1f}"
    results.append({k: round(v, 1) if isinstance(v, float) else v for k, v in row.items()})
    print(results[-1], flush=True)
print(json.dumps(results))
