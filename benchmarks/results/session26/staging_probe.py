"""Twenty-sixth session: the ping-pong kernel's one TMA output staged in two buffers a warpgroup
(slice j in buffer j % 2; `Signature.double_staged`) against one (each slice's store waits for
the previous slice's), µs a launch from CUDA graphs, each program in both variants alternated
over three rounds (bf16, CODA_AUTOTUNE=0's heuristic configurations).

Programs: CODA's plain GEMM and (a) bias + GELU at GPT-2's fc1 shape, LayerNorm-folded q/k/v
(GPT-2's c_attn, 16384 x 2304 x 768), and the LM head's forward with the target logit (GPT-2's
first row block). Writes $OUT/staging_probe.json.
"""

import json
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "session25"))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from ce_probe import REPS, with_target  # session25's probes
from kernel_configs import graph_us
from order_probe import fresh, randn

import coda
from coda.codegen import kernel as kernel_module
from coda.ops import norms

DOUBLE = kernel_module._double_staged
VARIANTS = {"one buffer": lambda launch, tma: False, "two buffers": DOUBLE}
ROUNDS = 3


def cases() -> dict:
    m, n, k = 16384, 3072, 768
    x, w = randn(m, k), randn(n, k, scale=k ** -0.5)
    out = {"plain_fc1": (coda.compile("EPILOGUE plain() { output = input; }"), x, w.T, {}),
           "a_bias_gelu_fc1": (coda.compile("EPILOGUE a(bias: col) { output = gelu(input + bias); }"),
                               x, w.T, dict(bias=randn(n)))}
    c = 768
    w3 = randn(3 * c, c, scale=c ** -0.5)
    out["ln_linear_c_attn"] = (norms.LN_LINEAR[True], x, w3.T, dict(
        shift=x[:, 0].float(), s=torch.randn(m, device="cuda"), ss=torch.rand(m, device="cuda") * c + c,
        inv_n=1.0 / c, eps=1e-5, u=torch.randn(3 * c, device="cuda"), cv=torch.randn(3 * c, device="cuda"),
        bias=randn(3 * c)))
    rows, vocab = 10624, 50257
    xe, we = randn(rows, c), randn(vocab, c, scale=c ** -0.5)
    block = randn(rows, -(-vocab // 16) * 16)[:, :vocab]
    target = torch.randint(vocab, (rows,), device="cuda").float()
    out["ce_forward_gpt2_block0"] = (with_target(False, False), xe, we.T, dict(
        out=block, outputs=["output", "lse", "t"], target=target, offset=0.0))
    return out


def main() -> None:
    results = {"gpu": torch.cuda.get_device_name(), "reps": REPS}
    for name, (prog, a, b, kwargs) in cases().items():
        times = {label: [] for label in VARIANTS}
        for _ in range(ROUNDS):
            for label, rule in VARIANTS.items():
                kernel_module._double_staged = rule
                variant = fresh(prog)
                times[label].append(round(graph_us(lambda v=variant: v(a, b, **kwargs), REPS), 1))
        kernel_module._double_staged = DOUBLE
        results[name] = times
        print(name, times, flush=True)
    Path(os.environ.get("OUT", "."), "staging_probe.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
