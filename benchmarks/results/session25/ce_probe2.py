"""Twenty-fifth session, second probe of the LM head's cross-entropy (µs a launch from CUDA graphs,
median of 5 replays, bf16), after ce_probe.py found GPT-2's forward slower without the target
logit's compare-select-sum although its code is shorter (offline: 4400 SASS instructions and no
spill against 5344 and 48 bytes spilled):

  forward    with and without `t`, alternated over three rounds (A B A B A B: a drifting clock
             would show as a trend, not as a difference), at GPT-2's two row blocks, BERT's head
             under its labelled-row limit (2458 of 16384 rows) and LLaMA-492M's;
  grad_map   GPT-2's first block in rows padded to 16 elements (50272, 32 B aligned: today) and
             to 64 (50304, 128 B aligned), in three map tiles.

Writes $OUT/ce_probe2.json.
"""

import json
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from ce_probe import DT, REPS, grad_map_us, with_target, without_target  # beside this script
from kernel_configs import graph_us

ROUNDS = 3
MAP_TILES = ((32, 128, 4), (16, 512, 4), (8, 1024, 4))


def forward(rows: int, vocab: int, hidden: int, bias: bool, norm: bool, count: int | None) -> dict:
    x = torch.randn(rows, hidden, device="cuda", dtype=DT)
    w = torch.randn(vocab, hidden, device="cuda", dtype=DT) * hidden ** -0.5
    out = torch.randn(rows, -(-vocab // 16) * 16, device="cuda", dtype=DT)[:, :vocab]
    target = torch.randint(vocab, (rows,), device="cuda").float()
    limit = None if count is None else torch.tensor([count], device="cuda", dtype=torch.int32)
    ops = {}
    if bias:
        ops["bias"] = torch.randn(vocab, device="cuda", dtype=DT) * 0.1
    if norm:
        ops["rstd"] = torch.rand(rows, device="cuda") + 0.5
    full, lean = with_target(bias, norm), without_target(bias, norm)
    times = {"with_t": [], "without_t": []}
    for _ in range(ROUNDS):
        times["with_t"].append(round(graph_us(lambda: full(
            x, w.T, out=out, outputs=["output", "lse", "t"], target=target, offset=0.0, m_limit=limit,
            **ops), REPS), 1))
        times["without_t"].append(round(graph_us(lambda: lean(
            x, w.T, out=out, outputs=["output", "lse"], m_limit=limit, **ops), REPS), 1))
    return {"shape": [rows, vocab, hidden], "count": count, "us": times}


def grad_map(rows: int, vocab: int, pad: int) -> dict:
    return {"shape": [rows, vocab], "row_stride": -(-vocab // pad) * pad,
            "us": grad_map_us(rows, vocab, MAP_TILES, pad)}


def main() -> None:
    results = {"gpu": torch.cuda.get_device_name(), "reps": REPS, "forward": {}, "grad_map": {}}
    for pad in (16, 64):
        results["grad_map"][f"gpt2_block0_pad{pad}"] = grad_map(10624, 50257, pad)
        print(pad, results["grad_map"][f"gpt2_block0_pad{pad}"], flush=True)
    for name, case in {"gpt2_block0": (10624, 50257, 768, False, False, None),
                       "gpt2_block1": (5760, 50257, 768, False, False, None),
                       "bert_labelled": (16384, 30522, 768, True, False, 2458),
                       "llama": (16384, 32000, 2048, False, True, None)}.items():
        results["forward"][name] = forward(*case)
        print(name, results["forward"][name], flush=True)
    Path(os.environ.get("OUT", "."), "ce_probe2.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
