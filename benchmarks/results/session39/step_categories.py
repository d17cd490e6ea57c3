"""GPT-2's profiled step (call 2) by what the kernels do, for `compile+graph` and `coda+graph`:
µs of GPU time per category, from the 40 longest kernels of each step (99.8% of the peer's
total, more than 99% of CODA's). Run: python benchmarks/results/session39/step_categories.py"""

import json
from pathlib import Path

#: (category, name fragments), first match wins; names as the profiler gives them (cut to 120)
CATEGORIES = [
    ("attention", ("sdpa", "cudnn::fusion")),
    ("LM head + cross-entropy", ("coda_gemm_ce_", "coda_map_ce_", "log_softmax", "152x256",
                                 "192x192_64x3_2x1_v_bz_coopB_NTN", "256x128_64x4_1x2_h_bz_coopA_NNT",
                                 "badd", "accumulate",
                                 "triton_poi_fused_mm_t", "scale_rows", "cutlass_75")),
    ("layers' GEMMs (CODA: with their fused epilogues)", ("nvjet", "splitKreduce", "coda_gemm")),
    ("layers' norms, activations, bias sums, finishing", ("layer_norm", "ln_", "fold_ln", "finish",
                                                         "sum_partials", "tanh", "fused_sum",
                                                         "fused_cat", "ReduceOp<float")),
    ("optimizer", ("multi_tensor_apply",)),
]


def category(name: str) -> str:
    return next((c for c, keys in CATEGORIES if any(k in name for k in keys)), "embeddings and the rest")


def main() -> None:
    path = Path(__file__).parent / "call2" / "gpt2.json"
    rows = {r["mode"]: r for r in json.loads(path.read_text())["rows"]}
    table = {}
    for mode in ("compile+graph", "coda+graph"):
        breakdown = rows[mode]["breakdown"]
        sums = dict.fromkeys([c for c, _ in CATEGORIES] + ["embeddings and the rest"], 0.0)
        for name, _, us, _ in breakdown["top"]:
            sums[category(name)] += us
        sums["not in the 40 longest"] = breakdown["total"] - sum(sums.values())
        table[mode] = sums
    print("| | compile+graph µs | coda+graph µs |\n| --- | --- | --- |")
    for key in table["coda+graph"]:
        print(f"| {key} | {table['compile+graph'][key]:,.0f} | {table['coda+graph'][key]:,.0f} |")
    print(f"| total | {rows['compile+graph']['breakdown']['total']:,.0f} | "
          f"{rows['coda+graph']['breakdown']['total']:,.0f} |")


if __name__ == "__main__":
    main()
