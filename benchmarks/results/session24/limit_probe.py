"""Twenty-fourth session: the tile configuration of a GEMM under `m_limit`. The heuristic picks
tiles from the full M; under a limit fewer rows run. Times the dx GEMM of the cross-entropy's
skipping backward, G [rows, V] @ w [V, 768], µs per launch from CUDA graphs of 10 launches
(median of 5 replays), in the heuristic's configuration and in 128 x 128 tiles:
  BERT's head   rows 16384, V 30522, limit 2458 (15% labelled)
  GPT-2's head  its two row blocks, 10624 and 5760 rows of V 50257, every row counted
and cuBLAS's dense GEMM of the same block beside them. Writes $OUT/limit_probe.json.
"""

import json
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from kernel_configs import graph_us  # benchmarks/kernel_configs.py

from coda.codegen import tuning
from coda.codegen.tuning import Config
from coda.ops.common import PLAIN

DT = torch.bfloat16
REPS = 10


def main() -> None:
    results = {"gpu": torch.cuda.get_device_name(), "reps": REPS, "cases": {}}
    cases = {"bert_dx": (16384, 30522, 2458), "gpt2_dx_block0": (10624, 50257, 10624),
             "gpt2_dx_block1": (5760, 50257, 5760)}
    for name, (rows, vocab, count) in cases.items():
        padded = -(-vocab // 16) * 16
        g = torch.randn(rows, padded, device="cuda", dtype=DT)[:, :vocab]
        w = torch.randn(vocab, 768, device="cuda", dtype=DT) * vocab ** -0.5
        out = torch.zeros(rows, 768, device="cuda", dtype=DT)
        limit = torch.tensor([count], device="cuda", dtype=torch.int32)
        launch = PLAIN.bind(g, w, out=out, m_limit=limit)
        times = {}
        for label, config in {"heuristic": tuning.heuristic("hopper", rows, 768, vocab),
                              "128x128": Config(128, 128, 64, 8, 4)}.items():
            plan, _ = PLAIN.triton.start(launch, config)
            fn = lambda plan=plan: plan.run(g, w, launch.values, out, launch.seed, (limit, None))  # noqa: E731
            times[label] = [round(graph_us(fn, REPS), 1) for _ in range(2)]
            times[label + "_config"] = str(config)
        dense = g[:count]
        times["cublas_dense_rows"] = [round(graph_us(lambda: torch.matmul(dense, w), REPS), 1)
                                      for _ in range(2)]
        results["cases"][name] = times
        print(name, times, flush=True)
    Path(os.environ.get("OUT", "."), "limit_probe.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
