"""Twenty-fifth session: two parts of the LM head's cross-entropy, timed apart (µs a launch from
CUDA graphs, median of 5 replays, bf16 on the GPU):

  grad_map   the gradient map (`grad_program` as a map, in place over a block of logits) in
             several map tiles, beside an in-place `mul_` of the same block (what streaming it
             once in and once out costs) — GPT-2's first block (10624 x 50257 in rows of 50272)
             and LLaMA-492M's (16384 x 32000);
  forward    the forward GEMM + statistics epilogue with the target logit's compare-select-sum
             (`t`, the op's) and without (the gather-dot variant tried and reverted this session),
             cuBLAS's bare GEMM beside it, and the target logit as a gather-dot (w[target], then
             TARGET_DOT) — GPT-2's first block, BERT's head (bias, every row) and LLaMA-492M's
             (RMSNorm folded: the rstd row operand).

Writes $OUT/ce_probe.json.
"""

import json
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from kernel_configs import graph_us  # benchmarks/kernel_configs.py

import coda
from coda.codegen import tuning
from coda.codegen.tuning import Config
from coda.ops import cross_entropy as ce

DT = torch.bfloat16
REPS = 10
MAP_TILES = [(32, 128, 4), (64, 128, 4), (32, 256, 4), (64, 256, 8), (16, 512, 4), (32, 512, 8),
             (128, 128, 8), (16, 1024, 8), (8, 1024, 4)]


def block(rows: int, vocab: int, pad: int = ce.ROW_PAD) -> torch.Tensor:
    """A [rows, vocab] block of logits in rows padded to `pad` elements (the op's ROW_PAD)."""
    width = -(-vocab // pad) * pad
    return (torch.randn(rows, width, device="cuda", dtype=DT) * 3)[:, :vocab]


def grad_map_us(rows: int, vocab: int, tiles, pad: int = ce.ROW_PAD) -> dict[str, float]:
    """µs a launch of the gradient map over a fresh [rows, vocab] block, in place, in each map
    tile (rows, columns, warps) of `tiles`: both of tuning.MAP_CONFIGS' tile keys patched."""
    z = block(rows, vocab, pad)
    ops = dict(target=torch.randint(vocab, (rows,), device="cuda").float(), offset=0.0,
               lse=torch.logsumexp(z.float(), dim=1), alpha=torch.full((rows,), 1 / rows, device="cuda"),
               hit=1.0, smooth=0.0)
    default, times = dict(tuning.MAP_CONFIGS), {}
    for bm, bn, warps in tiles:
        config = Config(bm, bn, 0, num_warps=warps)
        tuning.MAP_CONFIGS.update({"tile": config, "wide ragged tile": config})
        prog = ce.grad_program.__wrapped__(False, False, False)   # a fresh Program: no plan kept
        run = lambda prog=prog: prog.map(z, out=z, outputs=["output"], **ops)  # noqa: E731
        times[f"{bm}x{bn}w{warps}"] = round(graph_us(run, REPS), 1)
    tuning.MAP_CONFIGS.update(default)
    return times


def grad_map(rows: int, vocab: int) -> dict:
    z = block(rows, vocab)
    times = {"mul_inplace": round(graph_us(lambda: z.mul_(1.0), REPS), 1),
             **grad_map_us(rows, vocab, MAP_TILES)}
    gbytes = 2 * z.numel() * z.element_size() / 1e9
    return {"shape": [rows, vocab], "us": times,
            "TB_per_s": {k: round(gbytes / v * 1e3, 2) for k, v in times.items()}}


def forward_text(bias: bool, norm: bool, target: bool) -> str:
    """The LM head forward's epilogue with the target logit's compare-select-sum (`t`, the op's)
    or without it (the gather-dot variant this session tried and reverted)."""
    params = ["bias: col"] * bias + ["rstd: row"] * norm + ["target: row", "offset: scalar"] * target
    logit = "input" + " * rstd" * norm + " + bias" * bias
    t = "t = row_sum(where(col_index() + offset == target, logit, 0.0)); " * target
    return (f"EPILOGUE ce_forward({', '.join(params)}) {{ logit = {logit}; "
            f"lse = row_logsumexp(logit); {t}output = input; }}")


def with_target(bias: bool, norm: bool) -> coda.Program:
    return coda.compile(forward_text(bias, norm, True))


def without_target(bias: bool, norm: bool) -> coda.Program:
    return coda.compile(forward_text(bias, norm, False))


#: The gather-dot's row sum: x's row times its target's row of w (gathered).
TARGET_DOT = coda.compile("EPILOGUE ce_target_dot(wt: tile) { output = input; t = row_sum(input * wt); }")


def forward(rows: int, vocab: int, hidden: int, bias: bool, norm: bool) -> dict:
    x = torch.randn(rows, hidden, device="cuda", dtype=DT)
    w = torch.randn(vocab, hidden, device="cuda", dtype=DT) * hidden ** -0.5
    out = block(rows, vocab)
    target = torch.randint(vocab, (rows,), device="cuda")
    ops = {}
    if bias:
        ops["bias"] = torch.randn(vocab, device="cuda", dtype=DT) * 0.1
    if norm:
        ops["rstd"] = torch.rand(rows, device="cuda") + 0.5
    full, lean = with_target(bias, norm), without_target(bias, norm)
    times = {
        "with_t": graph_us(lambda: full(x, w.T, out=out, outputs=["output", "lse", "t"],
                                        target=target.float(), offset=0.0, **ops), REPS),
        "without_t": graph_us(lambda: lean(x, w.T, out=out, outputs=["output", "lse"], **ops), REPS),
        "cublas": graph_us(lambda: torch.matmul(x, w.T, out=out), REPS),
        "target_dot": graph_us(lambda: TARGET_DOT.map(x, wt=w[target], outputs=["t"]), REPS),
    }
    return {"shape": [rows, vocab, hidden], "bias": bias, "norm": norm,
            "us": {k: round(v, 1) for k, v in times.items()}}


def main() -> None:
    results = {"gpu": torch.cuda.get_device_name(), "reps": REPS, "grad_map": {}, "forward": {}}
    for name, shape in {"gpt2_block0": (10624, 50257), "llama": (16384, 32000)}.items():
        results["grad_map"][name] = grad_map(*shape)
        print(name, results["grad_map"][name], flush=True)
    for name, case in {"gpt2_block0": (10624, 50257, 768, False, False),
                       "bert": (16384, 30522, 768, True, False),
                       "llama": (16384, 32000, 2048, False, True)}.items():
        results["forward"][name] = forward(*case)
        print(name, results["forward"][name], flush=True)
    Path(os.environ.get("OUT", "."), "ce_probe.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
