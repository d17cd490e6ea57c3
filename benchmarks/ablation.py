"""Where the epilogue time goes: CODA with one epilogue stage at a time, against CODA plain.

    python benchmarks/ablation.py [--shapes 16384x3072x768,8192x11008x4096]

For each variant: median time, ratio to CODA's plain GEMM, the tuned config, and the kernel's
registers per thread and spills (from Triton's compiled kernel).
"""

import argparse
import json
import sys
from pathlib import Path

import torch
import triton.testing

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
import coda

VARIANTS = {
    "plain": "output = input;",
    "bias": "EPILOGUE(bias: col) { output = input + bias; }",
    "gelu": "output = gelu(input);",
    "bias_gelu": "EPILOGUE(bias: col) { output = gelu(input + bias); }",
    "dropout": "EPILOGUE(p: scalar) { output = dropout(input, p); }",
    "residual": "EPILOGUE(residual: tile) { output = input + residual; }",
    "rowsumsq": "output = input; ss = row_sum(input * input);",
    "residual_rowsumsq": "EPILOGUE(residual: tile) { output = input + residual; "
                         "ss = row_sum(output * output); }",
    "save_preact": "EPILOGUE(bias: col) { h = input + bias; save preact = h; output = gelu(h); }",
    "swiglu": "gate, up = unpack(input); output = silu(gate) * up;",
    "dgelu_colsum": "EPILOGUE(preact: tile) { output = input * gelu_grad(preact); "
                    "db = col_sum(output); }",
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", default="16384x3072x768,8192x11008x4096")
    parser.add_argument("--json", default="benchmarks/results/ablation.json")
    args = parser.parse_args()
    rows = []
    for shape in args.shapes.split(","):
        m, n, k = map(int, shape.split("x"))
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k**0.5
        ops = {"bias": torch.randn(n, device="cuda", dtype=torch.bfloat16), "p": 0.1,
               "residual": torch.randn(m, n, device="cuda", dtype=torch.bfloat16),
               "preact": torch.randn(m, n, device="cuda", dtype=torch.bfloat16)}
        plain_ms = None
        for name, src in VARIANTS.items():
            prog = coda.compile(src)
            used = {key: v for key, v in ops.items() if key in prog.ir.params}
            ms = triton.testing.do_bench(lambda: prog(a, w.T, seed=1, **used), warmup=25, rep=100,
                                         return_mode="median")
            plain_ms = plain_ms or ms
            plan = next(iter(prog._plans.values()))
            compiled = plan.compiled
            row = dict(shape=[m, n, k], variant=name, ms=ms, over_plain=ms / plain_ms,
                       config=str(plan.config), variant_mainloop=plan.kernel.variant,
                       regs=getattr(compiled, "n_regs", None),
                       spills=getattr(compiled, "n_spills", None))
            rows.append(row)
            print(f"{shape} {name:18s} {ms * 1e3:8.1f} us {ms / plain_ms:5.2f}x plain  "
                  f"regs {row['regs']} spills {row['spills']}  {plan.config}", flush=True)
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(dict(gpu=torch.cuda.get_device_name(), rows=rows), indent=1))


if __name__ == "__main__":
    main()
