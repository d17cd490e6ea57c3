"""Twentieth session, for the next: the norm-folded weight gradients as cuBLAS GEMM + CODA map.

    python dw_probe.py [--json out.json]          (GPU: timings; CPU + TRITON_INTERPRET=1: checks)

`layer_norm_linear`'s and `rms_norm_linear`'s weight gradients are one CODA GEMM each, dy.T @
xhat with the norm's weight terms in its epilogue (LN_DW, NORM_DW). At GPT-2's c_attn the
output is [2304, 768]: 108 tiles of 128 x 128 for 132 SMs, one wave 82% full, and CODA has no
split-K; the H200 profile puts it at 114 µs a launch (1.37 ms a GPT-2 step), where cuBLAS
splits K. This times, per shape, the CODA GEMM as the op launches it against cuBLAS's GEMM
with a float32 output of the bf16 operands (`torch.addmm(..., out_dtype=torch.float32)`,
no rounding before the epilogue) followed by the same epilogue as a map over that output
(`LN_DW.map`, `NORM_DW.map`): one more launch and a [N, K] float32 round trip (7 MB at
GPT-2's shape), against a fuller GPU. Results are checked against each other first.
"""

from __future__ import annotations

import argparse
import json

import torch
import triton.testing

from coda.ops.norms import LN_DW, NORM_DW

#: name -> (tokens M, output rows N, hidden K, program): GPT-2's c_attn (LayerNorm) and the
#: LLaMA-style model's q/k/v (RMSNorm, 384 tiles: a control where the waves are full)
CASES = {"gpt2_c_attn": (16384, 2304, 768, "ln"), "llama_qkv": (16384, 3072, 2048, "rms")}


def operands(m: int, n: int, k: int, device: str, dtype: torch.dtype) -> dict:
    torch.manual_seed(0)

    def rand(*shape: int, scale: float = 1.0, shift: float = 0.0) -> torch.Tensor:
        return (torch.randn(*shape, device=device) * scale + shift).to(dtype)

    return dict(dy=rand(m, n), xhat=rand(m, k), g=rand(k, scale=0.2, shift=1.0), beta=rand(k, scale=0.1),
                w=rand(n, k, scale=k**-0.5), db=torch.randn(n, device=device))   # db: float32, as the op's


def fused(kind: str, t: dict) -> tuple:
    """The GEMM with the epilogue, as layer_norm_linear / rms_norm_linear launch it."""
    if kind == "ln":
        outs = LN_DW(t["dy"].T, t["xhat"], g=t["g"], beta=t["beta"], db=t["db"], w=t["w"],
                     dtypes={"output": t["w"].dtype, "dg": t["g"].dtype, "dbeta": t["beta"].dtype})
        return outs["output"], outs["dg"], outs["dbeta"]
    outs = NORM_DW(t["dy"].T, t["xhat"], g=t["g"], w=t["w"],
                   dtypes={"output": t["w"].dtype, "dg": t["g"].dtype})
    return outs["output"], outs["dg"]


def split(kind: str, t: dict) -> tuple:
    """cuBLAS's GEMM into float32, then the same epilogue as a map."""
    if t["dy"].is_cuda:   # beta = 0: the float32 output is written, not read (the form that
        # ran on the H200's PyTorch 2.11 in session19/ce_probe.py)
        product = torch.empty(t["w"].shape, device="cuda", dtype=torch.float32)
        torch.addmm(product, t["dy"].T, t["xhat"], beta=0, out_dtype=torch.float32, out=product)
    else:
        product = t["dy"].T.float() @ t["xhat"].float()
    if kind == "ln":
        outs = LN_DW.map(product, g=t["g"], beta=t["beta"], db=t["db"], w=t["w"],
                         dtypes={"output": t["w"].dtype, "dg": t["g"].dtype, "dbeta": t["beta"].dtype})
        return outs["output"], outs["dg"], outs["dbeta"]
    outs = NORM_DW.map(product, g=t["g"], w=t["w"], dtypes={"output": t["w"].dtype, "dg": t["g"].dtype})
    return outs["output"], outs["dg"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json")
    args = parser.parse_args()
    cuda = torch.cuda.is_available()
    device, dtype = ("cuda", torch.bfloat16) if cuda else ("cpu", torch.float32)
    results = []
    for name, (m, n, k, kind) in CASES.items():
        if not cuda:
            m, n, k = 96, 80, 48
        t = operands(m, n, k, device, dtype)
        a, b = fused(kind, t), split(kind, t)
        diffs = [((x.float() - y.float()).norm() / y.float().norm()).item()
                 for x, y in zip(a, b, strict=True)]
        assert max(diffs) < (2e-2 if cuda else 1e-5), (name, diffs)
        times = {label: triton.testing.do_bench(lambda fn=fn: fn(kind, t), return_mode="median")
                 if cuda else None for label, fn in (("coda_gemm", fused), ("cublas_then_map", split))}
        print(f"{name} {m}x{n}x{k}: {times} ms; rel. diff {[f'{d:.1e}' for d in diffs]}")
        results.append(dict(case=name, shape=[m, n, k], ms=times, rel_diff=diffs))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(gpu=torch.cuda.get_device_name() if cuda else "cpu", results=results), f, indent=1)


if __name__ == "__main__":
    main()
