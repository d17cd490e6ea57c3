"""Where the epilogue time goes: CODA with one epilogue stage at a time, against CODA plain.

    python benchmarks/ablation.py [--shapes 16384x768x768,16384x3072x768] [--configs triton,pingpong]

For each shape, variant and configuration (the heuristic's, and the Hopper kernels' usual tiles
when `--configs` names them): device time from a CUDA graph of ten launches (no host cost), its
ratio to CODA's plain GEMM in the same configuration (cuBLAS's `torch.matmul` beside), and
the Triton kernel's registers and spills. The variants build up GPT-2's fused GEMMs stage by
stage: the out-projection's bias, residual and LayerNorm row sums, fc1's GELU and saved slope,
dh's slope tile and bias gradient.
"""

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
import side_by_side  # benchmarks/, beside this script
from kernel_configs import agrees, config_label, graph_us

import coda
from coda.codegen.tuning import Config

VARIANTS = {
    "plain": "output = input;",
    "bias": "EPILOGUE(bias: col) { output = input + bias; }",
    "bias_residual": "EPILOGUE(bias: col, residual: tile) { output = input + bias + residual; }",
    "bias_residual_stats": "EPILOGUE(bias: col, residual: tile) { output = input + bias + residual; "
                           "ss = row_sum(output * output); s = row_sum(output); }",
    "bias_stats": "EPILOGUE(bias: col) { output = input + bias; "
                  "ss = row_sum(output * output); s = row_sum(output); }",
    "bias_gelu": "EPILOGUE(bias: col) { output = gelu(input + bias); }",
    # what GELU's cost is made of: a few multiply-adds alone, one tanh (MUFU) alone
    "bias_fma4": "EPILOGUE(bias: col) { h = input + bias; output = ((h * 0.5 + 0.25) * h + 0.125) * h; }",
    "bias_tanh": "EPILOGUE(bias: col) { output = tanh(input + bias); }",
    "bias_gelu_slope": "EPILOGUE(bias: col) { h = input + bias; save slope = gelu_grad(h); "
                       "output = gelu(h); }",
    # the same in the twenty-ninth session's form of gelu and gelu_grad (11 float32 instructions
    # an element, the primitives now 10)
    "bias_gelu_slope_11": "EPILOGUE(bias: col) { h = input + bias; x2 = h * h;"
                          " t = tanh(h * (0.7978845608028654 + 0.035677408136300125 * x2));"
                          " hx = 0.5 * h; output = hx + hx * t;"
                          " q = h * (0.3989422804014327 + 0.05351611220445019 * x2);"
                          " save slope = (0.5 + q) + t * (0.5 - q * t); }",
    "bias_save": "EPILOGUE(bias: col) { h = input + bias; save copy = h; output = h; }",
    "slope": "EPILOGUE(slope: tile) { output = input * slope; }",
    "slope_colsum": "EPILOGUE(slope: tile) { output = input * slope; db = col_sum(output); }",
    "colsum": "output = input; db = col_sum(output);",
}
CONFIGS = {"triton": Config(128, 256, 64, 8, 3, split_epilogue=2),
           "pingpong": Config(128, 128, 64, 4, 4, split_epilogue=4, pingpong=True),
           # outputs stored from registers, not staged in shared memory for a TMA store
           "pingpong_r": Config(128, 128, 64, 4, 4, split_epilogue=4, pingpong=True, stage_outputs=False),
           "pingpong2_r": Config(128, 128, 64, 4, 4, split_epilogue=2, pingpong=True,
                                 stage_outputs=False)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", default="16384x768x768,16384x3072x768,16384x768x3072")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--configs", default="", help="besides the heuristic's: " + ", ".join(CONFIGS))
    parser.add_argument("--json", default="benchmarks/results/ablation_stages.json")
    args = parser.parse_args()
    side_by_side.require_gpu("benchmarks/ablation.py")
    torch.manual_seed(0)
    rows = []
    for shape in args.shapes.split(","):
        m, n, k = map(int, shape.split("x"))
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k**0.5
        ops = {"bias": torch.randn(n, device="cuda", dtype=torch.bfloat16),
               "residual": torch.randn(m, n, device="cuda", dtype=torch.bfloat16),
               "slope": torch.rand(m, n, device="cuda", dtype=torch.bfloat16)}
        plain_us = {}
        cublas_us = graph_us(lambda: torch.matmul(a, w.T), 10)
        print(f"{shape} cuBLAS {cublas_us:7.1f} us", flush=True)
        rows.append(dict(shape=[m, n, k], variant="cublas", us=round(cublas_us, 1)))
        for name in args.variants.split(","):
            prog = coda.compile(VARIANTS[name])
            launch = prog.bind(a, w.T, **{key: v for key, v in ops.items() if key in prog.ir.params})
            heuristic = prog.triton.config(launch, prog.triton.kernel(launch))
            configs = {"heuristic": heuristic} | {c: CONFIGS[c] for c in args.configs.split(",") if c}
            first = None
            for label, config in configs.items():
                plan = prog.triton.plan(launch, config)
                # every configuration's outputs are the first's (bf16 rounding of the sums apart)
                got = plan.run(launch.a, launch.b, launch.values, None, 0)
                first = first or {key: t.clone() for key, t in got.items()}
                us = graph_us(lambda: plan.run(launch.a, launch.b, launch.values, None, 0), 10)
                plain_us.setdefault(label, us)
                row = dict(shape=[m, n, k], variant=name, config=label, is_=config_label(config),
                           us=round(us, 1), over_plain=round(us / plain_us[label], 3),
                           agrees=agrees(got, first),
                           regs=getattr(plan.compiled, "n_regs", None),
                           spills=getattr(plan.compiled, "n_spills", None))
                rows.append(row)
                print(f"{shape} {name:20s} {label:9s} {row['is_']:22s} {us:7.1f} us "
                      f"{row['over_plain']:5.2f}x plain  agrees {row['agrees']}  regs {row['regs']} "
                      f"spills {row['spills']}",
                      flush=True)
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(dict(gpu=torch.cuda.get_device_name(), command=" ".join(sys.argv),
                                               rows=rows), indent=1))


if __name__ == "__main__":
    main()
