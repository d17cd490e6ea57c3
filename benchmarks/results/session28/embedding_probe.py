"""The table gradient of a 16384-token batch at GPT-2's size (50257 x 768, bf16): coda.ops.embedding's
sorted pass against PyTorch's backward, ids uniform (the benchmarks' random batches) and
Zipf-like (real text's skew), µs from CUDA graphs of 10 backward calls."""
import json
import sys

import torch

sys.path.insert(0, "benchmarks")
from kernel_configs import graph_us

from coda.ops.embedding import table_grad

rows, h, tokens = 50257, 768, 16384
dy = torch.randn(tokens, h, device="cuda", dtype=torch.bfloat16)
results = []
for law in ("uniform", "zipf1.1"):
    weights = (torch.ones(rows, dtype=torch.float64) if law == "uniform"
               else 1.0 / torch.arange(1, rows + 1, dtype=torch.float64) ** 1.1)
    ids = torch.multinomial(weights, tokens, replacement=True).cuda()
    torch_us = graph_us(lambda: torch.ops.aten.embedding_dense_backward(dy, ids, rows, -1, False), 10)
    coda_us = graph_us(lambda: table_grad(dy, ids, rows, None), 10)
    same = torch.allclose(table_grad(dy, ids, rows, None).float(),
                          torch.ops.aten.embedding_dense_backward(dy, ids, rows, -1, False).float(),
                          rtol=1e-2, atol=1e-2)
    results.append(dict(ids=law, top_count=int(torch.bincount(ids).max()), torch_us=round(torch_us, 1),
                        coda_us=round(coda_us, 1), agree=same))
    print(results[-1], flush=True)
print(json.dumps(results))
