"""Twenty-fifth session: the order of an epilogue's stores in the ping-pong kernel, and the tile of
the cross-entropy's gradient map at more vocabulary widths (µs a launch from CUDA graphs, median
of 5 replays, bf16, CODA_AUTOTUNE=0's heuristic configurations).

ce_probe2.py found GPT-2's LM-head forward 15-20% slower without the target logit's compare-
select-sum than with it, though its code is shorter. In both the epilogue stored the logits'
tile first: it waits (`tma.store_wait`) until the previous slice's TMA store has read the
shared-memory buffer, and only the reductions came between one slice's store and the next one's
wait. `codegen/epilogue.py` now stores the reductions' partials first and the tiles last
(`store_order`). Here each program runs in both orders, alternated over two rounds:

  tiles_first   the order before (the program's: `output` first)
  tiles_last    this session's

Programs: the LM head's forward with and without `t` (GPT-2's first row block, LLaMA-492M's),
the fast-path issue's (c) residual + row Σx² and (e) dGELU + bias gradient, the slope-times-
gradient + bias gradient of CODA's dh GEMM, LayerNorm's dxhat GEMM (GPT-2's c_attn backward),
and the plain GEMM for reference. Then the gradient map's tiles at BERT's (30522), LLaMA's
(32000) and LLaMA-1B's (128256) vocabularies in rows padded to 16 elements (as the op pads them),
and at GPT-2's (50257) in rows padded to 256 (a 512-byte stride). Writes $OUT/order_probe.json.
"""

import copy
import json
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from ce_probe import DT, REPS, grad_map_us, with_target, without_target  # beside this script
from kernel_configs import graph_us

import coda
from coda.codegen import epilogue
from coda.ops import norms

ORDERS = {"tiles_first": lambda outputs: outputs, "tiles_last": epilogue.store_order}
ROUNDS = 2


def fresh(prog: coda.Program) -> coda.Program:
    """The same program with no kernel built and no plan kept: its next launch generates code."""
    copy_ = copy.copy(prog)
    copy_._triton, copy_._plans = None, {}
    return copy_


def randn(*shape: int, scale: float = 1.0, dtype=DT) -> torch.Tensor:
    return (torch.randn(shape, device="cuda") * scale).to(dtype)


def cases() -> dict:
    """name: (program, A, B, launch keywords)."""
    out = {}
    for name, (m, n, k, norm) in {"ce_gpt2_block0": (10624, 50257, 768, False),
                                  "ce_llama": (16384, 32000, 2048, True)}.items():
        x, w = randn(m, k), randn(n, k, scale=k ** -0.5)
        block = randn(m, -(-n // 16) * 16)[:, :n]
        rstd = {"rstd": torch.rand(m, device="cuda") + 0.5} if norm else {}
        target = torch.randint(n, (m,), device="cuda").float()
        out[name + "_with_t"] = (with_target(False, norm), x, w.T, dict(
            out=block, outputs=["output", "lse", "t"], target=target, offset=0.0, **rstd))
        out[name + "_without_t"] = (without_target(False, norm), x, w.T, dict(
            out=block, outputs=["output", "lse"], **rstd))
    m, n, k = 16384, 3072, 768
    x, w = randn(m, k), randn(n, k, scale=k ** -0.5)
    out["plain_fc1"] = (coda.compile("EPILOGUE plain() { output = input; }"), x, w.T, {})
    out["c_residual_rowsumsq"] = (coda.compile(
        "EPILOGUE c(residual: tile) { output = input + residual; ss = row_sum(output * output); }"),
        x, w.T, dict(residual=randn(m, n)))
    out["e_dgelu_bias_grad"] = (coda.compile(
        "EPILOGUE e(pre: tile) { output = input * gelu_grad(pre); db = col_sum(output); }"),
        x, w.T, dict(pre=randn(m, n)))
    out["dh_slope_bias_grad"] = (coda.compile(
        "EPILOGUE dh(slope: tile) { output = input * slope; db = col_sum(output); }"),
        x, w.T, dict(slope=randn(m, n)))
    c = 768
    dy, w3, xin = randn(m, 3 * c), randn(3 * c, c, scale=c ** -0.5), randn(m, c)
    out["ln_dxhat_gpt2"] = (norms.LN_DXHAT, dy, w3, dict(
        shift=xin[:, 0].float(), s=torch.randn(m, device="cuda"), ss=torch.rand(m, device="cuda") * c + c,
        inv_n=1.0 / c, eps=1e-5, g=randn(c), xin=xin))
    return out


def orders() -> dict:
    results = {}
    for name, (prog, a, b, kwargs) in cases().items():
        times = {label: [] for label in ORDERS}
        for _ in range(ROUNDS):
            for label, order in ORDERS.items():
                epilogue.store_order = order
                variant = fresh(prog)
                times[label].append(round(graph_us(lambda v=variant: v(a, b, **kwargs), REPS), 1))
        epilogue.store_order = ORDERS["tiles_last"]
        results[name] = times
        print(name, times, flush=True)
    return results


def grad_map_tiles() -> dict:
    results = {}
    for name, (rows, vocab, pad) in {"bert": (16384, 30522, 16), "llama": (16384, 32000, 16),
                                     "llama1b": (4096, 128256, 16),
                                     "gpt2_block0_pad256": (10624, 50257, 256)}.items():
        results[name] = grad_map_us(rows, vocab, ((32, 128, 4), (16, 512, 4), (8, 1024, 4)), pad)
        print(name, results[name], flush=True)
    return results


def main() -> None:
    results = {"gpu": torch.cuda.get_device_name(), "reps": REPS, "orders": orders(),
               "grad_map": grad_map_tiles()}
    Path(os.environ.get("OUT", "."), "order_probe.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
